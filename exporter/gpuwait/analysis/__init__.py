"""What the GPU waits for: statistics over aligned sub-second series, the evidence of each
cause, the attribution of idle time, and the verdict as a collector (``metrics``)."""
