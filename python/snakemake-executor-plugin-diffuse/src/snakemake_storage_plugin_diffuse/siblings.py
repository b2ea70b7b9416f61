"""The files beside an input that tools open without being told: index files.

bwa opens ``genome.fa.amb .ann .bwt .pac .sa`` beside ``genome.fa``, samtools and bcftools its
``.fai``, htslib ``A.bam.bai`` (or ``A.bai``) beside ``A.bam`` and ``x.vcf.gz.tbi`` beside
``x.vcf.gz``, Picard and GATK ``genome.dict`` beside ``genome.fa``. A workflow written for a
shared file system declares ``genome.fa`` and leaves those undeclared. The rule used here:

- every regular file named ``<input name>.<anything>`` in the input's directory
  (``genome.fa.fai``, ``genome.fa.bwt.2bit.64``, ``A.bam.bai``, ``x.vcf.gz.tbi``);
- and ``<stem>.<suffix>`` for the index suffixes of the input's kind
  (:data:`STEM_SUFFIXES_BY_EXT`: FASTA, BAM/CRAM/SAM, VCF/BCF/BED/GFF), where the stem is the
  name without its extension (and, for a compressed file, without the one before it too):
  ``genome.dict`` beside ``genome.fa`` or ``genome.fa.gz``, ``A.bai`` beside ``A.bam``, a bwa,
  bowtie, minimap2 or hisat2 index made with the stem as its prefix.

The executor finds them in a listing of the directory (one per directory per run, sorted, so
that each input's siblings are a binary search away) and declares them as task inputs; the
storage plugin puts them beside the job's local copy of the input.
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

#: Extensions of compressed files: ``genome.fa.gz``'s stems are ``genome.fa`` and ``genome``.
COMPRESSED = ("gz", "bgz", "bz2", "xz", "zst")

_FASTA_INDEXES: Tuple[str, ...] = (
    ("dict",)  # Picard / GATK sequence dictionary (genome.dict beside genome.fa)
    + ("amb", "ann", "bwt", "pac", "sa", "0123", "bwt.2bit.64")  # bwa / bwa-mem2, prefix = stem
    + ("mmi",)  # minimap2
    + tuple(f"{k}.{ext}" for ext in ("bt2", "bt2l", "ebwt", "ebwtl") for k in range(1, 5))
    + tuple(f"rev.{k}.{ext}" for ext in ("bt2", "bt2l", "ebwt", "ebwtl") for k in (1, 2))
    + tuple(f"{k}.{ext}" for ext in ("ht2", "ht2l") for k in range(1, 9))  # hisat2
)

#: Index files named after the input's stem rather than its full name, by the input's extension
#: (a compression extension aside): htslib also tries the extension replaced (``A.bai`` beside
#: ``A.bam``, ``x.tbi`` beside ``x.vcf.gz``), and a FASTA file's dictionary and aligner indexes
#: are often named after its stem. An input with another extension has no stem siblings.
STEM_SUFFIXES_BY_EXT: Dict[str, Tuple[str, ...]] = {
    **{ext: _FASTA_INDEXES for ext in ("fa", "fasta", "fna", "fas", "faa", "ffn", "frn", "mfa")},
    **{ext: ("bai", "csi", "crai") for ext in ("bam", "cram", "sam")},
    **{ext: ("tbi", "csi") for ext in ("vcf", "bcf", "bed", "gff", "gff3", "gtf", "gvcf")},
}

#: Every stem suffix, of any extension.
STEM_SUFFIXES = frozenset(x for v in STEM_SUFFIXES_BY_EXT.values() for x in v)

#: The most siblings staged for one input. A directory holding more files that share an input's
#: name (``chunk`` with ``chunk.0001``...) stages none of them: the job symlinks them instead.
MAX_SIBLINGS = 64


def stems(name: str) -> List[Tuple[str, FrozenSet[str]]]:
    """The stems of ``name`` and the index suffixes that go with them: ``genome.fa`` ->
    ``genome``; ``genome.fa.gz`` -> ``genome.fa`` and ``genome``; ``A.bam`` -> ``A``; none
    for an extension not in :data:`STEM_SUFFIXES_BY_EXT`."""
    base, ext = os.path.splitext(name)
    ext = ext[1:].lower()
    found = [base]
    if ext in COMPRESSED:
        base, ext = os.path.splitext(base)
        ext = ext[1:].lower()
        found.append(base)
    suffixes = STEM_SUFFIXES_BY_EXT.get(ext)
    if not suffixes:
        return []
    return [(s, frozenset(suffixes)) for s in found if s]


def is_sibling(other: str, name: str) -> bool:
    """Whether a file named ``other`` in the directory of the input ``name`` is one of its
    siblings (the rule of the module's documentation)."""
    if other == name:
        return False
    if other.startswith(name + "."):
        return True
    return any(other.startswith(s + ".") and other[len(s) + 1 :] in sufs for s, sufs in stems(name))


def _run(names: Sequence[str], prefix: str) -> Tuple[int, int]:
    """The range of ``names`` (sorted) that start with ``prefix`` (which ends with ".")."""
    lo = bisect.bisect_left(names, prefix)
    hi = bisect.bisect_left(names, prefix[:-1] + "/", lo)  # "/" sorts right after "."
    return lo, hi


def sibling_names(names: Sequence[str], name: str) -> List[str]:
    """The siblings of ``name`` among ``names``, which must be sorted: the run of names that
    start with ``name + "."``, and the stem's index files (a scan of the run of names that
    start with ``stem + "."``, or a binary search per suffix when that run is long). In the
    order found, without repeats."""
    lo, hi = _run(names, name + ".")
    out: List[str] = list(names[lo:hi])
    for stem, sufs in stems(name):
        lo, hi = _run(names, stem + ".")
        if hi - lo <= len(sufs):
            found = [n for n in names[lo:hi] if n[len(stem) + 1 :] in sufs]
        else:
            found = []
            for suffix in sufs:
                j = bisect.bisect_left(names, f"{stem}.{suffix}", lo, hi)
                if j < hi and names[j] == f"{stem}.{suffix}":
                    found.append(names[j])
        out += [n for n in found if n != name and n not in out]
    return out


@dataclass
class Listing:
    """A directory's sorted names, and its modification time (ns) when they were read."""

    names: List[str]
    mtime_ns: int
    #: Whether the directory had not changed for a second when it was read: only then does an
    #: unchanged modification time show that nothing was added since (file systems whose
    #: clock ticks in seconds would hide a change made within the tick).
    settled: bool


class Listings:
    """Directory listings, each read once and again only after the directory changed.

    ``budget`` bounds the time spent re-reading changed directories to that share of the time
    since the first listing (the first listing of each directory is always made): a directory
    that jobs keep writing into is not re-read for every job. A listing that may be out of date
    is still used, and :meth:`get` says so (its ``current`` is ``None``): the job, which knows,
    reads the directory itself. At most ``max_names`` names are kept (about 70 bytes each): the
    listings used longest ago are dropped first, and read again if needed.
    """

    def __init__(self, budget: float = 0.05, settle_s: float = 1.0, max_names: int = 1_000_000) -> None:
        self.budget = budget
        #: a listing is trusted while the directory's time is unchanged only if the directory
        #: had not changed for this long when it was read (``-inf``: always)
        self.settle_s = settle_s
        self.max_names = max_names
        self.held = 0
        self.dirs: Dict[str, Listing] = {}  # in order of use, the latest last
        self.spent = 0.0
        self.reads = 0
        self.started = time.monotonic()

    def get(self, d: str) -> Tuple[List[str], Optional[int]]:
        """The names in directory ``d`` (sorted), and its modification time if the listing is
        known to be current (else ``None``). A directory that cannot be read has no names."""
        try:
            mtime = os.stat(d).st_mtime_ns  # before the listing: a later change shows as newer
        except OSError:
            return [], None
        have = self.dirs.pop(d, None)
        if have is not None:
            self.dirs[d] = have  # the latest used
            if have.mtime_ns == mtime and have.settled:
                return have.names, mtime
            if self.spent > self.budget * (time.monotonic() - self.started):
                return have.names, None
        t0 = time.monotonic()
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return [], None
        self.spent += time.monotonic() - t0
        self.reads += 1
        settled = time.time() - mtime / 1e9 > self.settle_s
        old = self.dirs.pop(d, None)
        self.held += len(names) - (len(old.names) if old is not None else 0)
        self.dirs[d] = Listing(names, mtime, settled)
        while self.held > self.max_names and len(self.dirs) > 1:
            first = next(iter(self.dirs))
            self.held -= len(self.dirs.pop(first).names)
        return names, mtime if settled else None
