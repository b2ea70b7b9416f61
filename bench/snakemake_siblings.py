#!/usr/bin/env python3
"""What finding the files beside an input costs (issue 38), on a directory of many files.

    target/python-venv/bin/python bench/snakemake_siblings.py [FILES=100000] [DIR]

Makes DIR (default target/bench-siblings) holding FILES empty files and, among them, a genome
with the index files bwa, samtools and GATK make beside it (genome.fa.amb .ann .bwt .pac .sa
.fai, genome.dict), then times, with the page cache warm (each figure the median of 5 runs,
of 3 for find_siblings, one run for symlink_all):

  listing          one listing of the directory, sorted (what the executor reads once per run)
  lookup           an input's siblings in that sorted listing (binary searches, and the
                   stem candidates): the executor's added work per input, after the listing
  find_siblings    the executor's whole added work per job for one input in that directory:
                   the directory's stat (is the listing current?), the lookup, a stat per
                   sibling found (regular file?), over the 100,000 inputs of the directory
  stat_list        the alternative without a listing: a stat for each name of a documented
                   list of index suffixes (full name, and stem for the input's kind), per
                   input (a FASTQ, 14 names; a FASTA, 14 and its stem's 49)
  list_per_job     the alternative without a cache: the listing again for every job
  symlink_all      the fallback to the shared path for every file of the directory (a symbolic
                   link per file beside the local copy, then removed): per job
Prints one line per figure and a JSON object with all of them.
"""

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from snakemake_executor_plugin_diffuse import find_siblings
from snakemake_storage_plugin_diffuse.siblings import Listings, sibling_names, stems

GENOME = ["genome.fa", "genome.fa.amb", "genome.fa.ann", "genome.fa.bwt", "genome.fa.pac",
          "genome.fa.sa", "genome.fa.fai", "genome.dict"]


def median_s(fn, reps=5):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    d = Path(sys.argv[2] if len(sys.argv) > 2 else "target/bench-siblings").resolve()
    d.mkdir(parents=True, exist_ok=True)
    have = len(os.listdir(d))
    if have < n:
        t0 = time.perf_counter()
        for i in range(n - len(GENOME)):
            (d / f"s{i:06d}.fastq").touch()
        for g in GENOME:
            (d / g).touch()
        print(f"made {n} files in {d} in {time.perf_counter() - t0:.1f} s")
    past = time.time() - 10
    os.utime(d, (past, past))  # settled: not changed within the last second
    names = sorted(os.listdir(d))
    inputs = [str(d / x) for x in names if x.endswith(".fastq")]
    out = {"files": len(names), "dir": str(d)}

    out["listing_s"] = median_s(lambda: sorted(os.listdir(d)))

    sample = inputs[:10_000]
    per = median_s(lambda: [sibling_names(names, os.path.basename(p)) for p in sample])
    out["lookup_us"] = per / len(sample) * 1e6
    per = median_s(lambda: [sibling_names(names, "genome.fa") for _ in range(1000)])
    out["lookup_fasta_us"] = per / 1000 * 1e6

    def all_jobs():
        listings = Listings()
        for p in inputs:
            find_siblings([p], {p}, listings)
        find_siblings([str(d / "genome.fa")], set(), listings)
        assert listings.reads == 1, listings.reads
    total = median_s(all_jobs, reps=3)
    out["find_siblings_all_jobs_s"] = total
    out["find_siblings_us_per_job"] = total / (len(inputs) + 1) * 1e6
    sibs, listed, _ = find_siblings([str(d / "genome.fa")], set(), Listings())
    assert sorted(os.path.basename(s) for s in sibs) == sorted(GENOME[1:]), sibs
    assert str(d) in listed

    full = ["fai", "gzi", "amb", "ann", "bwt", "pac", "sa", "0123", "bwt.2bit.64", "bai", "csi",
            "crai", "tbi", "idx"]

    def stat_list(p):
        base = os.path.basename(p)
        cands = [f"{base}.{x}" for x in full] + [f"{s}.{x}" for s, sufs in stems(base) for x in sufs]
        return [c for c in cands if os.path.exists(os.path.join(d, c))]
    per = median_s(lambda: [stat_list(p) for p in sample[:2000]])
    out["stat_list_us"] = per / 2000 * 1e6
    per = median_s(lambda: [stat_list(str(d / "genome.fa")) for _ in range(200)])
    out["stat_list_fasta_us"] = per / 200 * 1e6
    out["stat_list_fasta_names"] = len(full) + len(stems("genome.fa")[0][1])

    out["list_per_job_s"] = out["listing_s"]

    with tempfile.TemporaryDirectory(dir=d.parent) as tmp:
        def symlink_all():
            for x in names:
                os.symlink(d / x, os.path.join(tmp, x))
            for x in names:
                os.unlink(os.path.join(tmp, x))
        out["symlink_all_s"] = median_s(symlink_all, reps=1)

    print(f"files in the directory:             {out['files']}")
    print(f"listing (sorted), once per run:      {out['listing_s'] * 1e3:.1f} ms")
    print(f"lookup in the listing, per input:    {out['lookup_us']:.1f} us (FASTQ), "
          f"{out['lookup_fasta_us']:.1f} us (FASTA)")
    print(f"find_siblings, per job:              {out['find_siblings_us_per_job']:.1f} us "
          f"({out['find_siblings_all_jobs_s']:.2f} s for {len(inputs) + 1} jobs, one listing)")
    print(f"stat of a documented list, per input: {out['stat_list_us']:.1f} us ({len(full)} names, FASTQ), "
          f"{out['stat_list_fasta_us']:.1f} us ({out['stat_list_fasta_names']} names, FASTA)")
    print(f"listing per job (no cache):          {out['list_per_job_s'] * 1e3:.1f} ms")
    print(f"symlink every file, per job:         {out['symlink_all_s']:.1f} s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
