"""Right-sizing: per-slice recommendations, the consolidation plan (bin packing) and its periodic refresh."""
