"""The decode tile: units around the TE engines (so far the Flash-Decoding combine unit)."""
