"""Host-side allocator of KV-cache pages: a free list and reference counts.

The device holds the page data (`sampling.kv_cache.KVCache`); this object
decides which page ids a sequence may write. Page 0 is reserved as the
"null" page: table entries that point nowhere (padding rows, prompt pages
beyond a short prompt) use it, writes to it are garbage and reads of it are
always masked. Sharing is by reference count: a group's samples or a tree's
branches `retain` the pages they inherit and `release` them when done; a page
returns to the free list when its count reaches 0.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

NULL_PAGE = 0


class PagePoolError(RuntimeError):
    """Out of pages, or a release/retain of a page that is not allocated."""


class PagePool:
    def __init__(self, num_pages: int):
        if num_pages < 2:
            raise ValueError(f"num_pages must be >= 2 (page 0 is reserved), got {num_pages}")
        self.num_pages = num_pages
        self.refcount = np.zeros(num_pages, np.int32)
        # LIFO free list, lowest ids handed out first (deterministic layouts)
        self._free = list(range(num_pages - 1, NULL_PAGE, -1))

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def used_pages(self) -> int:
        return self.num_pages - 1 - len(self._free)

    def alloc(self, count: int) -> list[int]:
        """`count` fresh pages with reference count 1."""
        if count < 0:
            raise ValueError(f"cannot allocate {count} pages")
        if count > len(self._free):
            raise PagePoolError(
                f"out of KV pages: need {count}, {len(self._free)} free of {self.num_pages - 1}")
        pages = [self._free.pop() for _ in range(count)]
        self.refcount[pages] = 1
        return pages

    def retain(self, pages: Iterable[int]) -> None:
        """One more reference to each page (a branch that shares them)."""
        for page in self._allocated(pages, "retain"):
            self.refcount[page] += 1

    def release(self, pages: Iterable[int]) -> None:
        """Drops one reference to each page; pages reaching 0 become free."""
        for page in self._allocated(pages, "release"):
            self.refcount[page] -= 1
            if self.refcount[page] == 0:
                self._free.append(page)

    def _allocated(self, pages: Iterable[int], verb: str):
        """The non-null pages, each checked to be allocated."""
        for page in pages:
            if page == NULL_PAGE:
                continue
            if self.refcount[page] <= 0:
                raise PagePoolError(f"{verb} of page {page}, which is not allocated")
            yield page
