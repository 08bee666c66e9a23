//! Barracuda's B+tree with sequential-insert-aware split policies (filled by issue 4, "B+tree").
