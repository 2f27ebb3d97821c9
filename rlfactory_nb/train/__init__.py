"""Training: trajectories to tensors, the update loop, workers, checkpoints and metrics."""
