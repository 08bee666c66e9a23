//! The doublewrite area of a [`FileService`]: every page write goes first
//! to a small file of its own, synced, and only then to its place in the
//! data file, so a write that a crash tears in the data file has a whole
//! copy to be restored from (InnoDB's doublewrite buffer).
//!
//! Recovery can then start from the data file's own blocks: each carries
//! the LSN of its newest change, and replay skips the changes a block
//! already holds. Without the area the log would have to carry a page's
//! whole image before the first change after every checkpoint (as
//! PostgreSQL's full-page writes do), on the path of every commit.
//!
//! The area is a ring of [`DOUBLEWRITE_SLOTS`] slots, each one unit (a
//! block, or an uncompressed page) rounded up to the file's offset
//! alignment. A batch of page writes takes the next run of slots: one
//! write of all the copies (a `pwritev` from the page writes' own buffers
//! where a slot is a unit), one sync, then the data-file writes. A slot is
//! overwritten only once the data-file write it protected is durable: when
//! the ring wraps, the data file is synced first if it was written since
//! its last sync.
//!
//! [`FileService::restore_torn_pages`], at open and before anything reads
//! the data file, checks every slot: a copy whose checksum holds and whose
//! page in the data file fails its checksum, or is older, is written back.
//! A copy that fails its own checksum was torn itself, so its data-file
//! write never started.

use std::sync::Arc;

use barracuda_base::{Lsn, PageId};
use barracuda_io::{AlignedBuf, BlockFile, IoError, IoRequest};
use parking_lot::Mutex;

use super::FileService;
use crate::backend::PageFile;
use crate::error::{PoolError, Result};

/// Slots of a doublewrite area: 128 units, 2 MiB of 16 KiB pages, as
/// InnoDB's. With batches of 32 pages (the default queue depth) the data
/// file is synced once every four batches.
pub const DOUBLEWRITE_SLOTS: usize = 128;

/// See the module documentation.
pub(crate) struct Doublewrite {
    file: Arc<dyn BlockFile>,
    /// Bytes of one page write: a block, or an uncompressed page.
    unit_bytes: usize,
    /// Bytes of one slot: `unit_bytes` rounded up to the file's alignment.
    slot_bytes: usize,
    state: Mutex<State>,
}

struct State {
    /// The slot the next batch starts at.
    next: usize,
    /// The data file was written since its last sync: the slots before
    /// `next` may protect writes that are not durable yet.
    home_unsynced: bool,
    /// The area's file holds its zeros ([`FileService::empty_doublewrite`]
    /// cuts it to nothing; the next batch writes them again).
    zeroed: bool,
    /// The batch's copies, side by side, when slots are padded beyond a
    /// unit (allocated at the first such batch); otherwise the copies are
    /// written from the page writes' own buffers.
    buf: Option<AlignedBuf>,
}

/// What [`FileService::restore_torn_pages`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Slots holding a whole copy of a page.
    pub copies: usize,
    /// Pages written back to the data file from their copy.
    pub restored: usize,
}

fn file_error(operation: &'static str, offset_bytes: u64) -> impl FnOnce(IoError) -> PoolError {
    move |source| PoolError::File {
        operation,
        offset_bytes,
        source,
    }
}

impl Doublewrite {
    fn area_bytes(&self) -> u64 {
        (DOUBLEWRITE_SLOTS * self.slot_bytes) as u64
    }
}

impl FileService {
    /// Gives this data file a doublewrite area in `file` (its own file,
    /// used by nothing else) for page writes of `unit_bytes`. A file
    /// shorter than the area (new, or emptied at a clean close) is filled
    /// with zeros at the first page write. Call
    /// [`FileService::restore_torn_pages`] before the data file is read.
    pub fn with_doublewrite(mut self, file: Arc<dyn BlockFile>, unit_bytes: usize) -> Result<Self> {
        let alignment = file.alignment().offset_bytes.max(1);
        let slot_bytes = unit_bytes.next_multiple_of(alignment);
        let len = file.len().map_err(file_error("doublewrite len", 0))?;
        let zeroed = len >= (DOUBLEWRITE_SLOTS * slot_bytes) as u64;
        self.doublewrite = Some(Doublewrite {
            file,
            unit_bytes,
            slot_bytes,
            state: Mutex::new(State {
                next: 0,
                home_unsynced: false,
                zeroed,
                buf: None,
            }),
        });
        Ok(self)
    }

    /// Recovery: writes back every page whose copy in the doublewrite area
    /// is whole and whose block in the data file is not (torn, or never
    /// written), or is older than the copy; then syncs the data file. Call
    /// it before the data file is read. Nothing to do without an area.
    pub fn restore_torn_pages(&self) -> Result<RestoreReport> {
        let mut report = RestoreReport::default();
        let Some(dw) = &self.doublewrite else {
            return Ok(report);
        };
        let len = dw.file.len().map_err(file_error("doublewrite len", 0))?;
        let slots = (len.min(dw.area_bytes()) / dw.slot_bytes as u64) as usize;
        if slots == 0 {
            return Ok(report);
        }
        let align = dw.file.alignment().mem_bytes.max(1);
        let mut area = AlignedBuf::zeroed(slots * dw.slot_bytes, align);
        dw.file
            .read_at(0, &mut area)
            .map_err(file_error("doublewrite read", 0))?;
        let data_len = self.file().len().map_err(file_error("len", 0))?;
        let mut home = vec![0; dw.unit_bytes];
        for slot in 0..slots {
            let at = slot * dw.slot_bytes;
            let copy = &area[at..at + dw.unit_bytes];
            // A slot never written is zeros; one torn fails its checksum.
            let Ok(header) = barracuda_codec::read_header(copy) else {
                continue;
            };
            let Ok(copy_header) = barracuda_codec::verify(copy, header.page_id) else {
                continue;
            };
            report.copies += 1;
            let page_id = copy_header.page_id;
            let offset = page_id.0 * dw.unit_bytes as u64;
            if let Some(home_lsn) = self.home_lsn(page_id, offset, data_len, &mut home)?
                && home_lsn >= copy_header.lsn
            {
                continue;
            }
            tracing::warn!(
                page = page_id.0,
                lsn = copy_header.lsn.0,
                file = %self.file().path().display(),
                "restoring a torn page from the doublewrite area"
            );
            self.write_at(offset, copy)?;
            report.restored += 1;
        }
        if report.restored > 0 {
            self.sync_data()?;
        }
        Ok(report)
    }

    /// Empties the doublewrite area, after syncing the data file if it
    /// was written since its last sync: its copies protect nothing any
    /// more. A clean close does it, so that a closed database keeps no
    /// area, and so that [`FileService::restore_torn_pages`] at the next
    /// open finds nothing: a block damaged while the database was closed
    /// is then reported as corrupted, not quietly replaced by a copy that
    /// may be older than what the block held.
    pub(crate) fn empty_doublewrite(&self) -> Result<()> {
        let Some(dw) = &self.doublewrite else {
            return Ok(());
        };
        let mut state = dw.state.lock();
        if state.home_unsynced {
            self.sync_data()?;
            state.home_unsynced = false;
        }
        dw.file
            .set_len(0)
            .map_err(file_error("doublewrite set_len", 0))?;
        dw.file
            .sync_data()
            .map_err(file_error("doublewrite sync", 0))?;
        state.next = 0;
        state.zeroed = false;
        Ok(())
    }

    /// The LSN of `page_id`'s block in the data file, `None` if it is
    /// past the file's end or fails its checks.
    fn home_lsn(
        &self,
        page_id: PageId,
        offset: u64,
        data_len: u64,
        home: &mut [u8],
    ) -> Result<Option<Lsn>> {
        if offset + home.len() as u64 > data_len {
            return Ok(None);
        }
        self.read_at(offset, home)?;
        Ok(barracuda_codec::verify(home, page_id)
            .ok()
            .map(|header| header.lsn))
    }

    /// [`PageFile::write_batch`] through the doublewrite area, a run of
    /// slots at a time.
    pub(crate) fn write_batch_doubled(
        &self,
        dw: &Doublewrite,
        mut requests: Vec<IoRequest>,
    ) -> Vec<(u64, Result<()>)> {
        let mut state = dw.state.lock();
        let run_max = DOUBLEWRITE_SLOTS.min(self.queue_depth()).max(1);
        let mut done = Vec::with_capacity(requests.len());
        while !requests.is_empty() {
            let run: Vec<IoRequest> = requests.drain(..run_max.min(requests.len())).collect();
            match self.stage(dw, &mut state, &run, run_max) {
                Ok(()) => {
                    done.extend(self.write_batch_home(run));
                    state.home_unsynced = true;
                }
                Err(e) => {
                    // Nothing of this run reached the data file: its pages
                    // stay dirty, and each reports the area's error.
                    let message = e.to_string();
                    done.extend(run.iter().map(|r| {
                        let error = PoolError::Io {
                            page_id: PageId(r.offset_bytes / dw.unit_bytes as u64),
                            operation: "doublewrite",
                            message: message.clone(),
                        };
                        (r.tag, Err(error))
                    }));
                }
            }
        }
        done
    }

    /// Writes the copies of `run` to the area's next slots and syncs them.
    fn stage(
        &self,
        dw: &Doublewrite,
        state: &mut State,
        run: &[IoRequest],
        run_max: usize,
    ) -> Result<()> {
        if !state.zeroed {
            // Synced with the copies below.
            dw.file
                .write_zeros(0, dw.area_bytes())
                .map_err(file_error("doublewrite zeros", 0))?;
            state.zeroed = true;
        }
        if state.next + run.len() > DOUBLEWRITE_SLOTS {
            // The slots about to be reused may protect data-file writes
            // that are not durable yet.
            if state.home_unsynced {
                self.sync_data()?;
                state.home_unsynced = false;
            }
            state.next = 0;
        }
        for request in run {
            if request.buf.len() != dw.unit_bytes {
                return Err(PoolError::Corrupted {
                    page_id: PageId(request.offset_bytes / dw.unit_bytes as u64),
                    reason: format!(
                        "a page write of {} bytes, the doublewrite unit is {}",
                        request.buf.len(),
                        dw.unit_bytes
                    ),
                });
            }
        }
        let offset = (state.next * dw.slot_bytes) as u64;
        let written = if dw.slot_bytes == dw.unit_bytes {
            // The copies straight from the page writes' buffers.
            let bufs: Vec<&[u8]> = run.iter().map(|r| &r.buf[..]).collect();
            dw.file.write_vectored_at(offset, &bufs)
        } else {
            // Slots padded to the file's alignment: side by side in one
            // buffer, the padding zeros.
            let align = dw.file.alignment().mem_bytes.max(1);
            let buf = state
                .buf
                .get_or_insert_with(|| AlignedBuf::zeroed(run_max * dw.slot_bytes, align));
            for (i, request) in run.iter().enumerate() {
                let at = i * dw.slot_bytes;
                buf[at..at + dw.unit_bytes].copy_from_slice(&request.buf);
            }
            dw.file.write_at(offset, &buf[..run.len() * dw.slot_bytes])
        };
        written.map_err(file_error("doublewrite write", offset))?;
        dw.file
            .sync_data()
            .map_err(file_error("doublewrite sync", 0))?;
        state.next += run.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests may unwrap")]

    use std::sync::Arc;

    use barracuda_base::{Geometry, Lsn, PageId};
    use barracuda_codec::Codec;
    use barracuda_io::{AlignedBuf, BlockFile, FaultConfig, FaultFile, IoRequest, MemoryFile};

    use super::{DOUBLEWRITE_SLOTS, RestoreReport};
    use crate::adapters::{CodecService, FileService};
    use crate::backend::{PageCodec, PageFile};

    const UNIT: usize = 4096;

    fn files() -> (Arc<dyn BlockFile>, Arc<dyn BlockFile>) {
        (
            Arc::new(MemoryFile::new("data")),
            Arc::new(MemoryFile::new("doublewrite")),
        )
    }

    fn service(data: &Arc<dyn BlockFile>, area: &Arc<dyn BlockFile>) -> FileService {
        FileService::new(Arc::clone(data))
            .with_doublewrite(Arc::clone(area), UNIT)
            .unwrap()
    }

    /// An uncompressed block of `page_id` filled with `fill`, sealed at `lsn`.
    fn block(page_id: u64, fill: u8, lsn: u64) -> Vec<u8> {
        let codec = CodecService::new(Codec::None, Geometry::uncompressed(UNIT).unwrap()).unwrap();
        let mut page = vec![fill; UNIT];
        page[..40].fill(0);
        let mut block = vec![0; UNIT];
        codec.compress(PageId(page_id), &page, &mut block).unwrap();
        codec.seal(PageId(page_id), &mut block, Lsn(lsn)).unwrap();
        block
    }

    fn write(service: &FileService, pages: &[(u64, u8, u64)]) {
        let requests = pages
            .iter()
            .map(|&(page_id, fill, lsn)| {
                let mut buf = service.alloc_buf(UNIT);
                buf.copy_from_slice(&block(page_id, fill, lsn));
                IoRequest::write(page_id * UNIT as u64, buf, page_id)
            })
            .collect();
        for (_, result) in service.write_batch(requests) {
            result.unwrap();
        }
    }

    /// Overwrites the 512-byte sector at `offset` with `byte`, as a torn
    /// write leaves an old sector (or garbage) in a block.
    fn damage(file: &Arc<dyn BlockFile>, offset: u64, byte: u8) {
        let mut sector = AlignedBuf::zeroed(512, 512);
        sector.fill(byte);
        file.write_at(offset, &sector).unwrap();
    }

    /// Writes `bytes` (whole sectors) at `offset`, bypassing the area.
    fn put(file: &Arc<dyn BlockFile>, offset: u64, bytes: &[u8]) {
        let mut buf = AlignedBuf::zeroed(bytes.len(), 512);
        buf.copy_from_slice(bytes);
        file.write_at(offset, &buf).unwrap();
    }

    fn read(file: &Arc<dyn BlockFile>, page_id: u64) -> Vec<u8> {
        // Aligned as the file asks: a `Vec`'s address is only by chance.
        let mut buf = AlignedBuf::zeroed(UNIT, 512);
        file.read_at(page_id * UNIT as u64, &mut buf).unwrap();
        buf.to_vec()
    }

    /// Blocks smaller than the area's alignment: each slot is padded, and
    /// the copies go through the area's own buffer instead of a `pwritev`.
    #[test]
    fn padded_slots_hold_whole_copies() {
        const SMALL: usize = 1024;
        let align = |bytes| barracuda_io::Alignment {
            offset_bytes: bytes,
            mem_bytes: bytes,
        };
        let data: Arc<dyn BlockFile> = Arc::new(MemoryFile::with_alignment("data", align(SMALL)));
        let area: Arc<dyn BlockFile> =
            Arc::new(MemoryFile::with_alignment("doublewrite", align(4096)));
        let service = || {
            FileService::new(Arc::clone(&data))
                .with_doublewrite(Arc::clone(&area), SMALL)
                .unwrap()
        };
        let geometry = Geometry::new(4096, barracuda_base::BlockSize::Kib1).unwrap();
        let codec = CodecService::new(Codec::zlib_default(), geometry).unwrap();
        let small_block = |page_id: u64, fill: u8, lsn: u64| {
            let mut page = vec![fill; 4096];
            page[..40].fill(0);
            let mut block = vec![0; SMALL];
            codec.compress(PageId(page_id), &page, &mut block).unwrap();
            codec.seal(PageId(page_id), &mut block, Lsn(lsn)).unwrap();
            block
        };
        let requests = (1..=3u64)
            .map(|page_id| {
                let mut buf = AlignedBuf::zeroed(SMALL, SMALL);
                buf.copy_from_slice(&small_block(page_id, 0xb0 + page_id as u8, 20 + page_id));
                IoRequest::write(page_id * SMALL as u64, buf, page_id)
            })
            .collect();
        for (_, result) in service().write_batch(requests) {
            result.unwrap();
        }
        assert_eq!(area.len().unwrap(), (DOUBLEWRITE_SLOTS * 4096) as u64);
        // Page 2 torn at home: its copy, in the second padded slot, is whole.
        let mut sector = AlignedBuf::zeroed(SMALL, SMALL);
        sector.fill(0x55);
        data.write_at(2 * SMALL as u64, &sector).unwrap();
        let report = service().restore_torn_pages().unwrap();
        assert_eq!(
            report,
            RestoreReport {
                copies: 3,
                restored: 1
            }
        );
        let mut home = AlignedBuf::zeroed(SMALL, SMALL);
        data.read_at(2 * SMALL as u64, &mut home).unwrap();
        assert!(home[..] == small_block(2, 0xb2, 22)[..]);
    }

    #[test]
    fn a_torn_page_is_restored_from_its_copy() {
        let (data, area) = files();
        write(
            &service(&data, &area),
            &[(1, 0xa1, 10), (2, 0xa2, 11), (3, 0xa3, 12)],
        );
        assert_eq!(area.len().unwrap(), (DOUBLEWRITE_SLOTS * UNIT) as u64);
        // Page 2 torn: one of its sectors holds something else.
        damage(&data, 2 * UNIT as u64 + 2048, 0x55);
        // Page 3 older on disk than its copy (its write never happened).
        put(&data, 3 * UNIT as u64, &block(3, 0x03, 5));
        let report = service(&data, &area).restore_torn_pages().unwrap();
        assert_eq!(report.copies, 3);
        assert_eq!(report.restored, 2);
        assert_eq!(read(&data, 1), block(1, 0xa1, 10));
        assert_eq!(read(&data, 2), block(2, 0xa2, 11));
        assert_eq!(read(&data, 3), block(3, 0xa3, 12));
    }

    #[test]
    fn newer_pages_and_torn_copies_are_left_alone() {
        let (data, area) = files();
        write(&service(&data, &area), &[(1, 0xa1, 10), (2, 0xa2, 11)]);
        // Page 1 was written again since, through another slot that is
        // gone: the file's block is newer than the copy.
        put(&data, UNIT as u64, &block(1, 0xb1, 20));
        // Page 2's copy is torn (so its data-file write never started) and
        // the data file's block too: nothing whole to restore.
        damage(&area, UNIT as u64 + 512, 0x77);
        damage(&data, 2 * UNIT as u64 + 512, 0x77);
        let report = service(&data, &area).restore_torn_pages().unwrap();
        assert_eq!(report.copies, 1);
        assert_eq!(report.restored, 0);
        assert_eq!(read(&data, 1), block(1, 0xb1, 20));
    }

    #[test]
    fn a_page_past_the_end_of_the_data_file_is_restored() {
        let (data, area) = files();
        write(&service(&data, &area), &[(5, 0xa5, 10)]);
        data.set_len(0).unwrap();
        let report = service(&data, &area).restore_torn_pages().unwrap();
        assert_eq!(report.restored, 1);
        assert_eq!(read(&data, 5), block(5, 0xa5, 10));
    }

    #[test]
    fn the_ring_wraps_and_keeps_the_newest_copies() {
        let (data, area) = files();
        let service = service(&data, &area);
        // Three laps of the ring, 32 pages a batch, page ids reused.
        for lap in 0..3u64 {
            for batch in 0..DOUBLEWRITE_SLOTS as u64 / 32 {
                let pages: Vec<_> = (0..32)
                    .map(|i| (batch * 32 + i, lap as u8 + 1, 100 * lap + batch))
                    .collect();
                write(&service, &pages);
            }
        }
        assert_eq!(area.len().unwrap(), (DOUBLEWRITE_SLOTS * UNIT) as u64);
        // Every page's home is torn: each comes back at its last lap.
        for page_id in 0..DOUBLEWRITE_SLOTS as u64 {
            damage(&data, page_id * UNIT as u64 + 512, 0);
        }
        let report = service.restore_torn_pages().unwrap();
        assert_eq!(report.restored, DOUBLEWRITE_SLOTS);
        for page_id in 0..DOUBLEWRITE_SLOTS as u64 {
            assert_eq!(read(&data, page_id), block(page_id, 3, 200 + page_id / 32));
        }
    }

    /// A slot is reused only once the data-file write it protected is
    /// durable: after a crash that loses every unsynced write, each page
    /// of a lap and a half is in the data file or restorable.
    #[test]
    fn reusing_a_slot_syncs_the_write_it_protected() {
        let data = Arc::new(FaultFile::new(
            Arc::new(MemoryFile::new("data")),
            FaultConfig::default().track_crashes(true),
        ));
        let area = Arc::new(FaultFile::new(
            Arc::new(MemoryFile::new("doublewrite")),
            FaultConfig::default().track_crashes(true),
        ));
        let (data_file, area_file): (Arc<dyn BlockFile>, Arc<dyn BlockFile>) =
            (data.clone(), area.clone());
        let writer = service(&data_file, &area_file);
        let pages = DOUBLEWRITE_SLOTS as u64 * 3 / 2;
        for batch in 0..pages / 32 {
            let run: Vec<_> = (0..32).map(|i| (batch * 32 + i, 0xc0, 7)).collect();
            write(&writer, &run);
        }
        data.crash().unwrap();
        area.crash().unwrap();
        let report = service(&data_file, &area_file)
            .restore_torn_pages()
            .unwrap();
        assert_eq!(report.copies, DOUBLEWRITE_SLOTS);
        for page_id in 0..pages {
            assert_eq!(
                read(&data_file, page_id),
                block(page_id, 0xc0, 7),
                "page {page_id}"
            );
        }
    }

    /// A clean close empties the area (`trim`): a block damaged while the
    /// database is closed stays damaged, to be reported, rather than being
    /// replaced by a copy that may be older than what it held.
    #[test]
    fn trim_empties_the_area() {
        let (data, area) = files();
        let writer = service(&data, &area);
        write(&writer, &[(1, 0xa1, 10)]);
        writer.trim().unwrap();
        assert_eq!(area.len().unwrap(), 0);
        damage(&data, UNIT as u64 + 512, 0x55);
        let report = service(&data, &area).restore_torn_pages().unwrap();
        assert_eq!(report, RestoreReport::default());
        // The next page write fills the area with zeros again.
        write(&writer, &[(2, 0xa2, 11)]);
        assert_eq!(area.len().unwrap(), (DOUBLEWRITE_SLOTS * UNIT) as u64);
        assert_eq!(
            service(&data, &area).restore_torn_pages().unwrap().copies,
            1
        );
    }
}
