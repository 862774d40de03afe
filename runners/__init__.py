"""collsched on real hardware: the torch.distributed runner, backend, benchmark and CLI."""
