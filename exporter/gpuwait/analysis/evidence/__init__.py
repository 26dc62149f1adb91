"""The evidence of each cause, one module per cause: for every point of the GPU's grid,
whether the host (or the GPU, or the loop itself) shows that cause at that instant. Each
module reads the windows only through the typed accessors of the collectors that keep them,
and declares the options that tune it."""
