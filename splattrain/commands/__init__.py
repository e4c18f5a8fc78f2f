"""The eval, render and export commands, working from a run directory or a checkpoint."""
