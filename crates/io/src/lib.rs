//! Barracuda's file layer: a positional file trait over io_uring with O_DIRECT (filled by issue 3, "File layer").
