"""DSU (Decoding Scheduler Unit): the RV32IM core, its firmware and (later) the slot arbiter."""
