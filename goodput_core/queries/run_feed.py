"""A run's events in: what the :class:`~goodput_core.queries.calculator.Calculator`
is fed, from a store (``refresh``, ``pull``) or by the caller (``add``,
``add_payloads``), into one job timeline.

One writer process: the timeline is built incrementally. Several writer
processes on one run (``docs/semantics.md``, many writers): the run is read
again with each row's writer and held as columns per writer, and the job
timeline is the lead stream's (:mod:`goodput_core.queries.many_hosts`); a
run those columns cannot hold exactly, and events given to :meth:`add`, keep
every event with its writer (:mod:`goodput_core.queries.many_writers`).
Every page read is shown to the run's
:class:`~goodput_core.queries.host_outliers.HostTracker`, which builds
per-host calculators once a second process index appears.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Optional, Tuple

from goodput_core.events import SkipReason, from_payload
from goodput_core.queries.host_outliers import HostTracker
from goodput_core.queries.many_hosts import ManyHosts
from goodput_core.queries.many_writers import ManyWriters
from goodput_core.record.hooks import flush_before_read
from goodput_core.timeline.lead_columns import records_page
from goodput_core.timeline.payload_columns import payload_page
from goodput_core.timeline.spans import Timeline
from goodput_core.stores import StoreError, default_store_url, open_store

__all__ = ["RunFeed"]

_PAGE = 262_144  # events per store read in refresh()
logger = logging.getLogger("goodput")


def _default_url() -> str:
    return default_store_url()


class RunFeed:
    """The events of one run, read into its job timeline :attr:`tl`.

    Args:
      run: the run name (None: every event added is accepted).
      store: an open store, or None (the default store is opened by the
        first :meth:`refresh` when ``run`` is given).
      lock: the calculator's lock (held around every change of the timeline).
      liveness: the timelines' liveness setting (semantics.md rule 15).
      new_host_calculator: makes an empty calculator for one host's events.
      clock: the query time source of the host tracker.
    """

    def __init__(self, run: Optional[str], store: Any, *, lock: threading.RLock, liveness: bool,
                 new_host_calculator: Callable[[], Any], clock: Callable[[], float]):
        self.run = run
        self.store = store
        self.cursor = None
        # a calculator given a store reads it on its first query, refresh() or not
        self._read_on_query = store is not None
        self._warned: set = set()  # refresh()'s one-time warnings
        self._liveness = liveness
        self._lock = lock
        self._clock = clock
        self._new_host_calculator = new_host_calculator
        self.tl = Timeline()
        self.tl.liveness = liveness
        self.host_tracker = self._new_host_tracker()
        # Several writer processes on one run: job figures from the lead stream,
        # from the run's columns (hosts), or from every event (many: odd runs, add())
        self.many = ManyWriters(run)
        self.hosts = ManyHosts(run, liveness)
        self._by_records = False

    def _new_host_tracker(self) -> HostTracker:
        return HostTracker(self.run or "", self.store, clock=self._clock,
                           new_calculator=self._new_host_calculator)

    def add(self, events: Iterable[Any]) -> int:
        """Adds EventRecords (several writers: kept with their writer); returns how many."""
        events = events if isinstance(events, list) else list(events)
        with self._lock:
            many = self.many
            if many.active:
                many.extend(events)
                self.tl = self._lead_timeline(many)
                return len(events)
            stored = self.tl.add(events, self.run)
            if many.note_records(events, keep=True):
                self.tl = self._lead_timeline(many)
            return stored

    def add_payloads(self, payloads: Iterable[Any]) -> int:
        """Adds reference-format payload dicts; unparsable ones are counted."""
        payloads = payloads if isinstance(payloads, list) else list(payloads)
        columns = payload_page(payloads, self.run)
        if columns is not None:  # a large batch: read column-wise, shape by shape
            page, skipped = columns
            with self._lock:
                self.tl.tables.skipped.update(skipped)
                return self.tl.add_page(page)
        records = []
        with self._lock:
            for payload in payloads:
                parsed = from_payload(payload, run=self.run)
                if isinstance(parsed, SkipReason):
                    self.tl.tables.skipped[parsed.value] += 1
                else:
                    records.append(parsed)
            return self.tl.add(records, self.run)

    def read_before_first_query(self) -> None:
        """Reads the store once if nothing was read yet: a calculator given a
        store answers its first query from what is stored (the reference's
        calculator reads on query), never with 0 % of nothing."""
        if self._read_on_query:
            self._read_on_query = False
            if self.cursor is None:
                self.refresh()

    def refresh(self) -> int:
        """:meth:`Calculator.refresh <goodput_core.queries.calculator.Calculator.refresh>`."""
        self._read_on_query = False
        if self.store is None and not self._open_default_store():
            return 0
        flush_before_read(self.run, self.store)
        with self._lock:
            first = self.cursor is None
            n, self.cursor = self.pull(self.store, self.cursor)
        if first and not n:  # a typo in the run or the store path reads as 0 % otherwise
            self._warn_once("no-run", "goodput: no events of run %r in %s yet (goodput runs "
                            "--store %s lists the runs there)", self.run,
                            getattr(self.store, "url", self.store),
                            getattr(self.store, "url", self.store))
        return n

    def _open_default_store(self) -> bool:
        """The store a ``Recorder(run)`` given no store writes to, for a
        Calculator given a run and no store; False (warned once) while there
        is none to read."""
        url = _default_url()
        if self.run:
            try:
                self.store = open_store(url, create=False)
            except StoreError as exc:
                self._warn_once("no-store", "goodput: Calculator(%r) reads the default store, "
                                "where a Recorder given no store writes (%s): %s", self.run,
                                url, exc)
                return False
            self.host_tracker = self._new_host_tracker()
            return True
        self._warn_once("no-store", "goodput: a Calculator without a run reads no store: "
                        "pass run and store= (a Recorder given no store writes to %s)", url)
        return False

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    def pull(self, store: Any, cursor: Any = None) -> Tuple[int, Any]:
        """:meth:`Calculator.pull <goodput_core.queries.calculator.Calculator.pull>`:
        pages of records, or of numpy columns where the store has them
        (``read_columns``); once a second writer appears, pages with each
        row's writer (columns per writer), or records for an odd run."""
        read_columns = getattr(store, "read_columns", None)
        total = 0
        many = self.many
        with self._lock:
            while True:
                if many.active and not self._by_records:  # several writers: by columns
                    if self.host_tracker._columns is None:
                        self.host_tracker.use_columns(self.hosts.columns)
                    page, cursor, limit = self._writers_page(store, cursor)
                    self.hosts.add_page(page)
                    self.host_tracker.observe_indices(page.process_indices)
                    if self.hosts.odd is not None:  # not for columns: every event instead
                        self._to_records()
                        cursor, total = None, 0
                        continue
                    total += len(page)
                    if len(page) >= limit:
                        continue
                    if total:
                        tl = self.hosts.timeline()
                        if self.hosts.odd is not None:  # found while building it
                            self._to_records()
                            cursor, total = None, 0
                            continue
                        self.tl = tl
                    return total, cursor
                elif many.active:  # several writers, an odd run: every event, with its writer
                    page, cursor = store.read(self.run, since=cursor, limit=_PAGE)
                    many.extend(page)
                    self.host_tracker.observe(page)
                elif read_columns is not None:
                    page, cursor = read_columns(self.run, since=cursor, limit=_PAGE)
                    self.tl.add_page(page)  # also counts the corrupt rows skipped
                    self.host_tracker.observe_indices(page.process_indices)
                    if many.note_writers(page.writers):
                        cursor, total = None, 0  # a second writer: read again, with writers
                        continue
                else:
                    page, cursor = store.read(self.run, since=cursor, limit=_PAGE)
                    if page:
                        self.tl.add(page, self.run)
                        self.host_tracker.observe(page)
                        if many.note_records(page, keep=False):
                            cursor, total = None, 0
                            continue
                total += len(page)
                if len(page) < _PAGE:
                    if many.active and total:
                        self.tl = self._lead_timeline(many)
                    return total, cursor

    def _to_records(self) -> None:
        """An odd run (``ManyHosts.odd``): read again, every event as a record."""
        self._by_records = True
        self.many.reset()
        self.hosts = ManyHosts(self.run, self._liveness)  # (its columns are freed)
        self.host_tracker.use_columns(None)

    def _writers_page(self, store: Any, cursor: Any) -> Tuple[Any, Any, int]:
        """The next page of the run with each row's writer (and the most it
        could have held): columns where the store reads them so, else its
        records as columns."""
        if getattr(store, "columns_with_writers", False):
            # larger pages for many writers: the routing's per-writer work per page
            limit = max(_PAGE, 4096 * len(self.hosts.columns.streams))
            return (*store.read_columns(self.run, since=cursor, limit=limit, writers=True),
                    limit)
        records, cursor = store.read(self.run, since=cursor, limit=_PAGE)
        return records_page(self.run or "", records), cursor, _PAGE

    def _lead_timeline(self, many: Any) -> Timeline:
        """The job timeline of a run written by several processes (rule 13),
        with this calculator's liveness setting (rule 15)."""
        tl = many.timeline()
        tl.liveness = self._liveness
        return tl
