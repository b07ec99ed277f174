"""`distrain run --replicas`, launcher side: TorchFT replica groups and lighthouse."""
