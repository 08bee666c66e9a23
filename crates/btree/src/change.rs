//! Structure changes staged off-page: every page a split, merge or
//! redistribution touches is rebuilt as a [`Scratch`] image first; only when
//! the store says each image fits ([`crate::PageStore::would_fit`]) are they
//! written and committed. A change that does not fit is abandoned with
//! nothing written (pages it allocated are freed again).

use crate::page::{self, HeapOrder, Layout, RecBuf};
use crate::store::{Fit, OpContext, PageStore, PageWrite};
use barracuda_base::PageId;
use std::ops::Deref;

/// A page image being prepared: the page functions write into it as into a
/// guard, and nothing reaches the store until it is applied.
#[derive(Clone)]
pub(crate) struct Scratch {
    page_id: PageId,
    bytes: Vec<u8>,
    /// How the image was built from its page, while nothing else wrote to
    /// it ([`crate::recipe`]).
    recipe: Option<crate::recipe::Recipe>,
}

impl Scratch {
    /// A copy of page `page_id`, whose bytes are `page`.
    pub(crate) fn of(page_id: PageId, page: &[u8]) -> Self {
        Self {
            page_id,
            bytes: page.to_vec(),
            recipe: None,
        }
    }

    /// The image [`page::rebuild`] would give the page `g` holds, built
    /// directly rather than rebuilt into a copy of the page.
    pub(crate) fn rebuilt<G: PageWrite>(
        g: &G,
        layout: &Layout,
        recs: &[RecBuf],
        order: HeapOrder,
    ) -> Self {
        Self {
            page_id: g.page_id(),
            bytes: page::rebuilt_image(g, layout, recs, order),
            recipe: Some(crate::recipe::encode(
                g,
                layout,
                recs,
                page::GROUP_RECORDS_BUILD,
                order,
            )),
        }
    }

    /// Writes the image into `g`, the page it was built from: as a rebuild
    /// with its recipe if nothing wrote to it after the build.
    pub(crate) fn write_into<G: PageWrite>(self, g: &mut G) {
        match self.recipe {
            Some(recipe) => g.write_rebuilt(&self.bytes, |_| recipe),
            None => g.write_diff(&self.bytes),
        }
    }

    /// A copy of the page a guard holds.
    pub(crate) fn of_guard<G: PageWrite>(g: &G) -> Self {
        Self::of(g.page_id(), g)
    }
}

impl Deref for Scratch {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl PageWrite for Scratch {
    fn page_id(&self) -> PageId {
        self.page_id
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.recipe = None;
        self.bytes[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    fn commit(&mut self, _: &mut OpContext) -> Fit {
        Fit::Fits
    }
}

/// The pages of one structure change, staged and checked before any is
/// written: new images, and the guards the change latched beyond the
/// caller's path (new pages, siblings).
pub(crate) struct Change<'a, S: PageStore + 'a> {
    /// New images, at most one per page.
    pub(crate) images: Vec<Scratch>,
    /// Guards latched for this change.
    pub(crate) held: Vec<S::Exclusive<'a>>,
    /// Held pages this change allocated: freed if it is abandoned.
    pub(crate) allocated: Vec<PageId>,
    /// Held pages to free once the change is applied.
    pub(crate) to_free: Vec<PageId>,
    /// Set when the change could not be made only because a full leaf it
    /// does not hold the parent of must split first: a key of that leaf.
    pub(crate) split_first: Option<Vec<u8>>,
}

impl<'a, S: PageStore + 'a> Change<'a, S> {
    pub(crate) fn new() -> Self {
        Self {
            images: Vec::new(),
            held: Vec::new(),
            allocated: Vec::new(),
            to_free: Vec::new(),
            split_first: None,
        }
    }

    /// Stages `image`, replacing an earlier image of the same page.
    pub(crate) fn stage(&mut self, image: Scratch) {
        match self.images.iter_mut().find(|i| i.page_id == image.page_id) {
            Some(slot) => *slot = image,
            None => self.images.push(image),
        }
    }

    /// A held guard.
    pub(crate) fn held(&self, page_id: PageId) -> Option<&S::Exclusive<'a>> {
        self.held.iter().find(|g| g.page_id() == page_id)
    }

    /// Takes a held guard out.
    pub(crate) fn take_held(&mut self, page_id: PageId) -> Option<S::Exclusive<'a>> {
        let i = self.held.iter().position(|g| g.page_id() == page_id)?;
        Some(self.held.swap_remove(i))
    }
}
