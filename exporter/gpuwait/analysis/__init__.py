"""What the GPU waits for: statistics over aligned sub-second series, and the verdict."""
