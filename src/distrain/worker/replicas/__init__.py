"""`--replicas`, worker side: training through failures with TorchFT."""
