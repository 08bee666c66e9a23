//! Barracuda's buffer pool: compressed blocks and uncompressed frames on an LRU and an unzip_LRU (filled by issue 5, "Buffer pool").
