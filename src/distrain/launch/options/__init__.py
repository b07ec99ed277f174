"""The command line's options: names, abbreviations, the torch-free torchrun table, usage checks."""
