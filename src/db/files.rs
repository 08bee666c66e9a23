//! What a database directory must hold, checked before anything in it is
//! created, changed or deleted (see `docs/safety.md`, "Damaged and
//! missing files").
//!
//! - A directory with none of the store's files (`CATALOG`, `wal.log`,
//!   `wal-*.log`, `tree-*`) is new, and only then initialised.
//! - Otherwise `CATALOG` must be there and intact (its checksum), and
//!   `wal.log` too, not empty, unless the catalog is the one written first
//!   when the directory was initialised (an interrupted initialisation,
//!   with no tree yet).
//! - Every tree of the catalog has its data file, and every tree file of
//!   the directory is either named by the catalog, or listed by it as
//!   pending deletion (a compaction that did not finish), or empty (a
//!   tree creation cut short before its catalog write): any other is
//!   refused, never deleted.
//! - Each checkpoint records, in the log's checkpoint slot, the catalog
//!   generation it saw and, per tree, the LSN of the meta page's block
//!   in the data file once synced ([`FileStamps`]). At open a catalog of an
//!   older generation is refused, and so is a data file whose meta page
//!   is missing, damaged or older than recorded (an older copy of the
//!   file, or one cut short).

use std::collections::HashSet;
use std::path::Path;

use barracuda_base::{Geometry, Lsn};
use barracuda_io::BlockFile;

use crate::catalog::{CATALOG_FILE_NAME, Catalog, TreeEntry, directory_error};
use crate::error::{Error, Result};
use crate::wal::{CHECKPOINT_PAYLOAD_BYTES_MAX, CONTROL_FILE_NAME, parse_segment_file_name};

/// A tree file's id and whether it is the data file (`.bdb`) or the
/// doublewrite area (`.dbw`).
pub(crate) fn parse_tree_file_name(name: &str) -> Option<(u16, bool)> {
    let rest = name.strip_prefix("tree-")?;
    let (id, data) = if let Some(id) = rest.strip_suffix(".bdb") {
        (id, true)
    } else {
        (rest.strip_suffix(".dbw")?, false)
    };
    if id.len() != 5 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id.parse().ok()?, data))
}

/// The store's files found in a directory, before anything was opened.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    /// `CATALOG` exists.
    pub catalog: bool,
    /// Bytes of `wal.log`, if it exists.
    pub control_bytes: Option<u64>,
    /// Names of the log's segment files.
    pub segments: Vec<String>,
    /// Tree files: name, id, data file or not, bytes.
    pub tree_files: Vec<(String, u16, bool, u64)>,
}

impl Inventory {
    pub(crate) fn take(dir: &Path) -> Result<Inventory> {
        let mut inventory = Inventory::default();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| directory_error(dir, format!("cannot list: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| directory_error(dir, format!("cannot list: {e}")))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let bytes = || {
                entry
                    .metadata()
                    .map(|m| m.len())
                    .map_err(|e| directory_error(dir, format!("cannot stat {name}: {e}")))
            };
            if name == CATALOG_FILE_NAME {
                inventory.catalog = true;
            } else if name == CONTROL_FILE_NAME {
                inventory.control_bytes = Some(bytes()?);
            } else if parse_segment_file_name(&name).is_some() {
                inventory.segments.push(name);
            } else if let Some((id, data)) = parse_tree_file_name(&name) {
                let bytes = bytes()?;
                inventory.tree_files.push((name, id, data, bytes));
            }
        }
        inventory.segments.sort();
        inventory.tree_files.sort();
        Ok(inventory)
    }

    /// The store's files present, for messages (at most a few named).
    fn names(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        if self.control_bytes.is_some() {
            names.push(CONTROL_FILE_NAME);
        }
        names.extend(self.segments.iter().map(String::as_str));
        names.extend(self.tree_files.iter().map(|(name, ..)| name.as_str()));
        let more = names.len().saturating_sub(4);
        names.truncate(4);
        let mut text = names.join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    }

    /// Whether the directory holds none of the store's files.
    pub(crate) fn is_new(&self) -> bool {
        !self.catalog
            && self.control_bytes.is_none()
            && self.segments.is_empty()
            && self.tree_files.is_empty()
    }

    /// The catalog of a directory that is not new, refused if missing.
    pub(crate) fn require_catalog(&self, dir: &Path, catalog: Option<Catalog>) -> Result<Catalog> {
        catalog.ok_or_else(|| {
            directory_error(
                dir,
                format!(
                    "{CATALOG_FILE_NAME} is missing, but the directory holds {}: it is a \
                     database whose catalog was lost (restore {CATALOG_FILE_NAME}; nothing was \
                     changed), or the remains of one",
                    self.names()
                ),
            )
        })
    }

    /// Whether the log may be created: only with the first catalog of a
    /// new directory (no tree was ever created). Otherwise a missing or
    /// empty `wal.log` is refused.
    pub(crate) fn check_log(&self, dir: &Path, catalog: &Catalog) -> Result<bool> {
        let fresh = catalog.never_held_a_tree();
        match self.control_bytes {
            Some(bytes) if bytes > 0 => Ok(false),
            _ if fresh => Ok(true),
            None => Err(directory_error(
                dir,
                format!(
                    "{CONTROL_FILE_NAME} is missing: the log's checkpoint is lost, and a new \
                     log would be replayed onto pages of the old one (restore it)"
                ),
            )),
            Some(_) => Err(directory_error(
                dir,
                format!(
                    "{CONTROL_FILE_NAME} is empty: the log's checkpoint is lost, and a new log \
                     would be replayed onto pages of the old one (restore it)"
                ),
            )),
        }
    }

    /// Checks the tree files against the catalog: every tree has its data
    /// file, and every other tree file may be deleted (pending in the
    /// catalog, or empty). Returns the files that may be deleted.
    pub(crate) fn check_tree_files(&self, dir: &Path, catalog: &Catalog) -> Result<Vec<String>> {
        let live: HashSet<u16> = catalog.trees.iter().map(|t| t.id).collect();
        for entry in &catalog.trees {
            let name = entry.file_name();
            if !self.tree_files.iter().any(|(n, ..)| *n == name) {
                return Err(directory_error(
                    dir,
                    format!(
                        "{name}, the data file of tree {:?}, is missing (restore it)",
                        entry.name
                    ),
                ));
            }
        }
        let mut orphans = Vec::new();
        for (name, id, _, bytes) in &self.tree_files {
            if live.contains(id) {
                continue;
            }
            if !catalog.pending.contains(id) && *bytes > 0 {
                return Err(directory_error(
                    dir,
                    format!(
                        "{name} ({bytes} bytes) belongs to no tree of {CATALOG_FILE_NAME}: \
                         {CATALOG_FILE_NAME} may be an older copy (restore the current one, \
                         or move {name} away)"
                    ),
                ));
            }
            orphans.push(name.clone());
        }
        Ok(orphans)
    }
}

/// Deletes `names` (tree files the catalog accounts for as deletable) and
/// syncs the directory.
pub(crate) fn remove_files(dir: &Path, names: &[String]) -> Result<()> {
    for name in names {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => tracing::info!("deleted {name}: left by an unfinished compaction"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(directory_error(dir, format!("cannot delete {name}: {e}"))),
        }
    }
    if !names.is_empty() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| directory_error(dir, format!("cannot sync: {e}")))?;
    }
    Ok(())
}

/// Magic of a checkpoint payload of [`FileStamps`].
const STAMPS_MAGIC: u32 = u32::from_le_bytes(*b"BRST");
const STAMPS_VERSION: u8 = 1;
/// Flag: every tree of the catalog is listed.
const STAMPS_COMPLETE: u8 = 1;
const STAMPS_HEADER_BYTES: usize = 16;
const STAMP_BYTES: usize = 10;

/// Trees one checkpoint can list (the slot's payload is one sector's).
pub(crate) const STAMPS_TREES_MAX: usize =
    (CHECKPOINT_PAYLOAD_BYTES_MAX - STAMPS_HEADER_BYTES) / STAMP_BYTES;

/// What a checkpoint records about the files, in its slot's payload:
///
/// ```text
/// offset size field
///      0    4 magic "BRST"
///      4    1 version 1
///      5    1 flags: bit 0, every tree of the catalog is listed
///      6    2 trees listed, n
///      8    8 the catalog generation
///     16 10*n per tree: id u16, the LSN of its meta page's block u64
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileStamps {
    pub catalog_generation: u64,
    /// Whether every tree of the catalog is in `trees`.
    pub complete: bool,
    /// Per tree: its id and the LSN of its meta page's block in the data
    /// file once the checkpoint had synced it (a tree whose block could not
    /// be read then is not listed, and `complete` is false).
    pub trees: Vec<(u16, Lsn)>,
}

impl FileStamps {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let listed = self.trees.len().min(STAMPS_TREES_MAX);
        let complete = self.complete && listed == self.trees.len();
        let mut bytes = Vec::with_capacity(STAMPS_HEADER_BYTES + listed * STAMP_BYTES);
        bytes.extend_from_slice(&STAMPS_MAGIC.to_le_bytes());
        bytes.push(STAMPS_VERSION);
        bytes.push(if complete { STAMPS_COMPLETE } else { 0 });
        bytes.extend_from_slice(&(listed as u16).to_le_bytes());
        bytes.extend_from_slice(&self.catalog_generation.to_le_bytes());
        for &(id, lsn) in &self.trees[..listed] {
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes.extend_from_slice(&lsn.0.to_le_bytes());
        }
        bytes
    }

    /// `None` for an empty payload (a checkpoint of an earlier build, or
    /// the log's first); an error for one this build cannot read (the
    /// slot's checksum held, so it is not damage but another format).
    pub(crate) fn decode(payload: &[u8]) -> Result<Option<FileStamps>> {
        if payload.is_empty() {
            return Ok(None);
        }
        let invalid = |reason: &str| Error::CheckpointCorrupted {
            slot: 0,
            reason: if reason.is_empty() {
                "unreadable file stamps"
            } else {
                "file stamps of another format"
            },
        };
        let header = payload
            .get(..STAMPS_HEADER_BYTES)
            .ok_or_else(|| invalid(""))?;
        let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let u64_at = |b: &[u8], at: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(x)
        };
        let magic = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        if magic != STAMPS_MAGIC || header[4] != STAMPS_VERSION {
            return Err(invalid("format"));
        }
        let listed = usize::from(u16_at(header, 6));
        let body = &payload[STAMPS_HEADER_BYTES..];
        if body.len() != listed * STAMP_BYTES {
            return Err(invalid(""));
        }
        let trees = body
            .chunks_exact(STAMP_BYTES)
            .map(|c| (u16_at(c, 0), Lsn(u64_at(c, 2))))
            .collect();
        Ok(Some(FileStamps {
            catalog_generation: u64_at(header, 8),
            complete: header[5] & STAMPS_COMPLETE != 0,
            trees,
        }))
    }

    /// Checks the catalog against the stamps: not older than the one the
    /// checkpoint saw, and naming every stamped tree unless it changed
    /// since (a compaction swapped a tree).
    pub(crate) fn check_catalog(&self, dir: &Path, catalog: &Catalog) -> Result<()> {
        if catalog.generation < self.catalog_generation {
            return Err(directory_error(
                dir,
                format!(
                    "{CATALOG_FILE_NAME} is generation {}, but the last checkpoint saw \
                     generation {}: it is an older copy (restore the current one)",
                    catalog.generation, self.catalog_generation
                ),
            ));
        }
        if catalog.generation == self.catalog_generation {
            for (id, _) in &self.trees {
                if !catalog.trees.iter().any(|t| t.id == *id) {
                    return Err(directory_error(
                        dir,
                        format!(
                            "{CATALOG_FILE_NAME} does not name tree id {id}, which the last \
                             checkpoint recorded"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// What the checkpoint recorded of `id`'s meta page: `Some` if the
    /// tree's data file held pages then.
    pub(crate) fn meta_lsn(&self, id: u16) -> Option<Lsn> {
        self.trees
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, lsn)| *lsn)
    }
}

/// The geometry of a tree's blocks.
pub(crate) fn tree_geometry(entry: &TreeEntry) -> Result<Geometry> {
    entry.options().geometry()
}

/// Checks a tree's data file against what the last checkpoint recorded:
/// its meta page must be there, whole, and no older than recorded.
pub(crate) fn check_tree_file(
    dir: &Path,
    entry: &TreeEntry,
    file: &dyn BlockFile,
    recorded: Lsn,
    checkpoint_lsn: Lsn,
) -> Result<()> {
    let name = entry.file_name();
    let block_bytes = tree_geometry(entry)?.block_size_bytes();
    let refuse = |what: String| {
        Err(directory_error(
            dir,
            format!(
                "{name}, the data file of tree {:?}, {what}, but the checkpoint at {checkpoint_lsn} \
                 recorded its meta page at {recorded} (restore the file)",
                entry.name
            ),
        ))
    };
    match barracuda_mtr::meta_block_lsn(file, block_bytes)? {
        None => refuse(format!("holds {} bytes, no meta page", file.len()?)),
        Some(Err(e)) => refuse(format!("has a damaged meta page ({e})")),
        Some(Ok(lsn)) if lsn < recorded => {
            refuse(format!("is an older copy: its meta page is at {lsn}"))
        }
        Some(Ok(_)) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_file_names_parse() {
        assert_eq!(parse_tree_file_name("tree-00001.bdb"), Some((1, true)));
        assert_eq!(parse_tree_file_name("tree-65535.dbw"), Some((65535, false)));
        for name in [
            "tree-1.bdb",
            "tree-0000a.bdb",
            "tree-00001.log",
            "CATALOG",
            "tree-99999.bdb",
        ] {
            assert_eq!(parse_tree_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn stamps_round_trip_and_cap() {
        for trees in [0usize, 1, 3, STAMPS_TREES_MAX, STAMPS_TREES_MAX + 5] {
            let stamps = FileStamps {
                catalog_generation: 7 + trees as u64,
                complete: true,
                trees: (1..=trees as u16)
                    .map(|i| (i, Lsn(4096 * u64::from(i))))
                    .collect(),
            };
            let bytes = stamps.encode();
            assert!(bytes.len() <= CHECKPOINT_PAYLOAD_BYTES_MAX);
            let read = FileStamps::decode(&bytes).unwrap().unwrap();
            assert_eq!(read.catalog_generation, stamps.catalog_generation);
            assert_eq!(read.complete, trees <= STAMPS_TREES_MAX);
            assert_eq!(read.trees[..], stamps.trees[..trees.min(STAMPS_TREES_MAX)]);
        }
        assert_eq!(FileStamps::decode(&[]).unwrap(), None);
        assert!(FileStamps::decode(b"garbage that is no stamps").is_err());
    }
}
