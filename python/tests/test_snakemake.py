"""Snakemake on diffuse: the executor and storage plugins of python/snakemake-executor-plugin-diffuse
against the session's real dispatcher and workers (conftest.py), with a real Snakemake (9.27).

- Snakemake's own tests for executor plugins (``snakemake.common.tests``), as the official
  plugins run them, with jobs run warm (the default: each job a child forked from a warm
  Snakemake on the worker) and cold (``--diffuse-warm false``: a new Snakemake process each);
- jobs run warm: in a child of the worker's warm process, as a fresh ``python -m snakemake``
  would (run directory, argv, exit codes), a changed interpreter setting in a new interpreter,
  and a worker that cannot start a warm Snakemake recognised (the job then runs cold);
- job inputs read from the workers' caches (traffic counters, hard-linked local copies);
- files beside the inputs (index files): the tutorial's read mapping with the real bwa,
  samtools and bcftools gives the local executor's calls and reads the genome's index from the
  caches; the sibling rule, the executor's listings, the links beside local copies, index times;
- Snakemake's semantics: temp(), protected(), shadow rules, logs, resources;
- reruns: one input changed reruns exactly what Snakemake's dry run names, with the new bytes,
  and a job Snakemake reruns is run by diffuse even where diffuse keeps results for reuse;
- failures reported with diffuse's reason, Ctrl-C cancelling the run's tasks, status read in
  one request per poll.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Counter, Dict, List, Optional

import pytest

pytest.importorskip("snakemake", reason="Snakemake 9 needs Python 3.11+ (scripts/test-python.sh installs it)")

from snakemake.common.tests import TestWorkflowsLocalStorageBase  # noqa: E402
from snakemake_executor_plugin_diffuse import (  # noqa: E402
    ExecutorSettings,
    _is_warm_start_failure,
    find_siblings,
    parse_bool,
    snakemake_argv,
    task_resources,
)
from snakemake_executor_plugin_diffuse import warm as warm_entry  # noqa: E402
from snakemake_storage_plugin_diffuse import ENV_INPUTS, ENV_STAGED, StorageObject, StorageProvider  # noqa: E402
from snakemake_storage_plugin_diffuse.siblings import MAX_SIBLINGS, Listings, is_sibling, sibling_names  # noqa: E402

from diffuse_client import Client, Task  # noqa: E402
from helpers import Cluster, unique, wait_until  # noqa: E402

#: The storage settings of the quick start: inputs through the diffuse storage plugin, local
#: copies made by each job (not on the shared file system).
CACHED = [
    "--default-storage-provider", "diffuse",
    "--shared-fs-usage", "persistence", "software-deployment", "sources", "source-cache",
]

#: The executor's arguments for each way of running jobs: warm (the default) and cold.
PATHS = {"warm": [], "cold": ["--diffuse-warm", "false"]}


# ---------------------------------------------------------------- Snakemake's own tests


class TestWorkflows(TestWorkflowsLocalStorageBase):
    """``test_simple_workflow`` and ``test_group_workflow`` of Snakemake's executor-plugin test
    base, as snakemake-executor-plugin-slurm and -cluster-generic run them (no default storage
    provider, a shared file system)."""

    __test__ = True

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cluster = cluster
        monkeypatch.setenv("DIFFUSE_CLIENT_TOKEN", cluster.client_token)

    def get_executor(self) -> str:
        return "diffuse"

    def get_executor_settings(self) -> ExecutorSettings:
        return ExecutorSettings(url=self.cluster.url, job=unique("smk-base"))


class TestWorkflowsCold(TestWorkflows):
    """The same with ``warm=False``: each job a new ``python -m snakemake`` process."""

    def get_executor_settings(self) -> ExecutorSettings:
        return ExecutorSettings(url=self.cluster.url, job=unique("smk-base-cold"), warm=False)


@pytest.mark.parametrize("path", ["warm", "cold"])
@pytest.mark.parametrize("case", ["simple", "groups"])
def test_snakemakes_testcases_with_the_diffuse_storage(cluster: Cluster, tmp_path: Path, case: str, path: str) -> None:
    """The same two workflows of Snakemake's test base, run with the quick start's storage
    settings (inputs through the ``diffuse`` provider, local copies made in the tasks), which the
    base class cannot set (its ``shared-fs-usage`` is all or nothing)."""
    import snakemake.common.tests as base

    work = tmp_path / case
    shutil.copytree(Path(base.__file__).parent / "testcases" / case, work)
    run_snakemake(cluster, work, *CACHED, *PATHS[path])
    expected = ["test3.out"] + (
        ["test1.out", "test2.out", "a.log", "b.log", "c.log", "res/somedir1.out", "res/somedir2/subdir.out"]
        if case == "simple"
        else [f"test{k}.{s}.out" for k in (1, 2) for s in (1, 2, 3)]
    )
    missing = [f for f in expected if not (work / f).exists()]
    assert not missing, missing
    p = run_snakemake(cluster, work, *CACHED, "-n")
    assert "Nothing to be done" in p.stdout + p.stderr


# ---------------------------------------------------------------- helpers

#: The quick start's profile (python/snakemake-executor-plugin-diffuse/README.md, README.md).
QUICK_START = """executor: diffuse
jobs: 500
default-storage-provider: diffuse
shared-fs-usage: [persistence, software-deployment, sources, source-cache]
diffuse-job: {job}
"""


def run_snakemake(
    cluster: Cluster,
    workdir: Path,
    *args: str,
    check: bool = True,
    timeout: float = 300,
    defaults: bool = True,
) -> "subprocess.CompletedProcess[str]":
    """``python -m snakemake --executor diffuse --jobs 8 ARGS`` in ``workdir`` against
    ``cluster`` (without ``defaults``, ``python -m snakemake ARGS``)."""
    env = dict(os.environ)
    env["DIFFUSE_DISPATCHER"] = cluster.url
    env["DIFFUSE_CLIENT_TOKEN"] = cluster.client_token
    base = ["--executor", "diffuse", "--jobs", "8"] if defaults else []
    cmd = [sys.executable, "-m", "snakemake", *base, "--nocolor", *args]
    p = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        pytest.fail(f"snakemake failed ({p.returncode}):\n{p.stderr[-6000:]}\n" + cluster.dump_logs())
    return p


def cursor(client: Client) -> Optional[int]:
    """The listing cursor after which the tasks submitted from now on are listed."""
    submitted = client.status().submitted
    return submitted - 1 if submitted else None


def rules_run(client: Client, since: int) -> List[str]:
    """The rule of each Snakemake job's task submitted after the listing cursor ``since``
    (task ids are ``smk-<run>-<jobid>-<rule>-a<attempt>``)."""
    out = []
    for t in client.iter_tasks(after=since):
        m = re.match(r"smk-[0-9a-f]+-\d+-(.+)-a\d+$", t.id)
        if m:
            out.append(m.group(1))
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_inputs(d: Path, n: int, size: int) -> List[Path]:
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = d / f"in{i}.bin"
        p.write_bytes(os.urandom(size))
        out.append(p)
    return out


# ---------------------------------------------------------------- inputs from the caches


LOCALITY = """
N = {n}
READERS = {readers}
rule all:
    input: expand("out/{{i}}_{{r}}.txt", i=range(N), r=range(READERS))
rule first:
    input: "data/in{{i}}.bin"
    output: "out/{{i,[0-9]+}}_0.txt"
    shell: "(sha256sum < {{input}} | cut -c1-64; echo {{input}}; stat -c %h {{input}}) > {{output}}"
rule more:
    input: "data/in{{i}}.bin", "out/{{i}}_0.txt"
    output: "out/{{i,[0-9]+}}_{{r,[1-9][0-9]*}}.txt"
    shell: "(sha256sum < {{input[0]}} | cut -c1-64; echo {{input[0]}}; stat -c %h {{input[0]}}) > {{output}}"
"""


def test_inputs_are_read_from_the_workers_caches(cluster: Cluster, tmp_path: Path) -> None:
    """4 files of 1 MB, each read by 4 jobs (one first, then three more): shared storage serves
    each file about once, the other reads are the workers' caches, and each job reads a hard
    link of the staged copy in its task directory (not the shared path)."""
    client = cluster.client()
    n, readers, size = 4, 4, 1_000_000
    inputs = write_inputs(tmp_path / "data", n, size)
    (tmp_path / "Snakefile").write_text(LOCALITY.format(n=n, readers=readers))
    profile = tmp_path / "profile"
    profile.mkdir()
    job = unique("smk-quick-start")
    (profile / "config.yaml").write_text(QUICK_START.format(job=job))
    before = client.status().traffic
    run_snakemake(cluster, tmp_path, "--profile", str(profile), defaults=False)
    after = client.status().traffic
    assert client.job(job).succeeded == n * readers
    storage = after.bytes_storage - before.bytes_storage
    cached = (after.bytes_local - before.bytes_local) + (after.bytes_peer - before.bytes_peer)
    print(f"shared storage served {storage} B, the workers' caches {cached} B")
    # 16 job reads of 1 MB and 12 of the small out/*_0.txt files
    assert n * size <= storage < 2 * n * size, (storage, cached)
    assert cached >= (n * readers - 2 * n) * size, (storage, cached)
    for i, src in enumerate(inputs):
        for r in range(readers):
            digest, path, links = (tmp_path / "out" / f"{i}_{r}.txt").read_text().split("\n")[:3]
            assert digest == sha(src)
            # the local copy is in the task's scratch directory, under the worker's cache...
            assert "/work/" in path and "snakemake-storage" in path and path.endswith(f"data/in{i}.bin")
            assert str(tmp_path) not in path
            # ...and a hard link of the cached copy (cache, staged input, local copy)
            assert int(links) >= 3


# ---------------------------------------------------------------- files beside the inputs


#: The read-mapping workflow of Snakemake's tutorial (bwa mem -> samtools sort -> samtools index
#: -> bcftools mpileup | bcftools call). It declares data/genome.fa only; bwa opens the index
#: files beside it (genome.fa.amb .ann .bwt .pac .sa) and bcftools its .fai, undeclared.
READ_MAPPING = """
SAMPLES = ["A", "B"]
rule all:
    input: "calls/all.vcf"
rule bwa_map:
    input: "data/genome.fa", "data/samples/{sample}.fastq"
    output: "mapped_reads/{sample}.bam"
    shell: "bwa mem {input} | samtools view -Sb - > {output}"
rule samtools_sort:
    input: "mapped_reads/{sample}.bam"
    output: "sorted_reads/{sample}.bam"
    shell: "samtools sort -T sorted_reads/{wildcards.sample} -O bam {input} > {output}"
rule samtools_index:
    input: "sorted_reads/{sample}.bam"
    output: "sorted_reads/{sample}.bam.bai"
    shell: "samtools index {input}"
rule bcftools_call:
    input:
        fa="data/genome.fa",
        bam=expand("sorted_reads/{sample}.bam", sample=SAMPLES),
        bai=expand("sorted_reads/{sample}.bam.bai", sample=SAMPLES)
    output: "calls/all.vcf"
    shell: "bcftools mpileup -f {input.fa} {input.bam} | bcftools call -mv - > {output}"
"""

#: The index files bwa and samtools make beside the genome, none of them declared.
GENOME_INDEX = ["genome.fa.amb", "genome.fa.ann", "genome.fa.bwt", "genome.fa.pac", "genome.fa.sa", "genome.fa.fai"]


def make_read_mapping_data(data: Path, samples: List[str], seed: int = 38, length: int = 30_000) -> Dict[str, List[int]]:
    """A random genome of ``length`` bases (indexed by ``bwa index`` and ``samtools faidx``, as
    in the tutorial's data) and, per sample, 20x of simulated 100-bp reads (both strands, 0.2%
    errors) from the genome with 12 SNPs (6 shared by all samples). Returns each sample's SNP
    positions (0-based)."""
    import random

    rng = random.Random(seed)
    genome = "".join(rng.choice("ACGT") for _ in range(length))
    (data / "samples").mkdir(parents=True, exist_ok=True)
    lines = "\n".join(genome[i : i + 60] for i in range(0, length, 60))
    (data / "genome.fa").write_text(f">chr1\n{lines}\n")
    comp = str.maketrans("ACGT", "TGCA")
    shared = rng.sample(range(500, length - 500), 6)
    snps = {}
    for s in samples:
        pos = sorted(set(shared + rng.sample(range(500, length - 500), 6)))
        seq = list(genome)
        for p in pos:
            seq[p] = rng.choice([b for b in "ACGT" if b != genome[p]])
        snps[s] = pos
        mutated, n, read_len = "".join(seq), length * 20 // 100, 100
        out = []
        for i in range(n):
            start = rng.randrange(0, length - read_len)
            r = [b if rng.random() >= 0.002 else rng.choice("ACGT") for b in mutated[start : start + read_len]]
            read = "".join(r) if rng.random() < 0.5 else "".join(r).translate(comp)[::-1]
            out.append(f"@{s}_{i}\n{read}\n+\n{'I' * read_len}\n")
        (data / "samples" / f"{s}.fastq").write_text("".join(out))
    for cmd in (["bwa", "index", "genome.fa"], ["samtools", "faidx", "genome.fa"]):
        subprocess.run(cmd, cwd=data, check=True, capture_output=True)
    return snps


def variant_records(vcf: Path) -> List[str]:
    """The variant lines of a VCF (not its header, which names the input paths)."""
    return [line for line in vcf.read_text().splitlines() if line and not line.startswith("#")]


def test_read_mapping_reads_the_genome_index_beside_its_input_from_the_caches(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The tutorial's read mapping with the quick start's profile: bwa finds its index files and
    bcftools the .fai beside the declared genome (they are staged beside its local copy), the
    calls are those of Snakemake's local executor, and on the second use the genome and its index
    files come from the workers' caches, not shared storage."""
    missing = [t for t in ("bwa", "samtools", "bcftools") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found (Debian packages bwa samtools bcftools; scripts/test.sh installs them)")
    client = cluster.client()
    local, remote = tmp_path / "local", tmp_path / "diffuse"
    snps = make_read_mapping_data(local / "data", ["A", "B"])
    shutil.copytree(local / "data", remote / "data")
    for d in (local, remote):
        (d / "Snakefile").write_text(READ_MAPPING)
    run_snakemake(cluster, local, "--cores", "2", defaults=False)
    expected = variant_records(local / "calls" / "all.vcf")
    called = {int(line.split("\t")[1]) - 1 for line in expected}
    assert all(p in called for s in snps.values() for p in s), (snps, expected)

    profile = tmp_path / "profile"
    profile.mkdir()
    job = unique("smk-read-mapping")
    (profile / "config.yaml").write_text(QUICK_START.format(job=job))
    since = cursor(client)
    run_snakemake(cluster, remote, "--profile", str(profile), defaults=False)
    assert variant_records(remote / "calls" / "all.vcf") == expected
    data = remote / "data"
    genome = sum((data / n).stat().st_size for n in ["genome.fa"] + GENOME_INDEX)
    reads = (data / "samples" / "A.fastq").stat().st_size

    def traffic(rule: str) -> List[Dict[str, int]]:
        tasks = [t for t in client.iter_tasks(after=since) if re.match(rf"smk-[0-9a-f]+-\d+-{rule}-a\d+$", t.id)]
        assert all(t.outcome is not None for t in tasks)
        return [t.outcome.report["traffic"] for t in tasks if t.outcome is not None]

    # The call reads the genome (and its index files, declared as its task's inputs too) after
    # both mapping jobs cached them: from a worker's cache, its own or a peer's. What it reads
    # from storage is at most the BAM files and their indexes, written since.
    (call,) = traffic("bcftools_call")
    bams = sum(p.stat().st_size for p in (remote / "sorted_reads").iterdir())
    print("bcftools_call", call)
    assert call["bytes_local"] + call["bytes_peer"] >= genome, (call, genome)
    assert call["bytes_storage"] <= bams, (call, bams)

    # Both mapping jobs again: the genome, its index files and the reads come from the workers'
    # caches (their own or a peer's), none from storage.
    since = cursor(client)
    run_snakemake(cluster, remote, "--profile", str(profile), "--forcerun", "bwa_map",
                  "mapped_reads/A.bam", "mapped_reads/B.bam", defaults=False)
    mapped = traffic("bwa_map")
    print("bwa_map", mapped)
    assert len(mapped) == 2
    for t in mapped:
        assert t["bytes_storage"] == 0, t
        assert t["bytes_local"] + t["bytes_peer"] >= genome + reads, (t, genome, reads)
    # nothing was written beside the shared genome
    assert sorted(p.name for p in data.iterdir()) == sorted(["genome.fa", "samples"] + GENOME_INDEX)


def test_siblings_rule() -> None:
    """Which files beside an input are its siblings: ``<name>.*``, and the index files named
    after the stem of a FASTA, BAM/CRAM or VCF-like file; a binary search in a sorted listing
    finds exactly the names the rule accepts."""
    names = sorted([
        "genome.fa", "genome.fa.amb", "genome.fa.bwt", "genome.fa.fai", "genome.dict",
        "genome.1.bt2", "genome.rev.1.bt2", "genome.fa-old", "genome.txt", "genomeX.fa", "genome",
        "A.bam", "A.bam.bai", "A.bai", "A.fastq", "x.vcf.gz", "x.vcf.gz.tbi", "x.tbi", "x.dict",
        "chunk", "chunk.1",
    ])
    expected = {
        "genome.fa": ["genome.fa.amb", "genome.fa.bwt", "genome.fa.fai", "genome.1.bt2", "genome.dict", "genome.rev.1.bt2"],
        "A.bam": ["A.bam.bai", "A.bai"],
        "A.fastq": [],  # A.bai is A.bam's: a FASTQ has no stem siblings
        "x.vcf.gz": ["x.vcf.gz.tbi", "x.tbi"],  # not x.dict: a dictionary goes with a FASTA
        "chunk": ["chunk.1"],
        "genome.txt": [],
    }
    for name, want in expected.items():
        assert sibling_names(names, name) == want, name
        assert sorted(n for n in names if is_sibling(n, name)) == sorted(want), name


def test_siblings_found_in_one_listing_per_directory(tmp_path: Path) -> None:
    """The executor's side: regular files only, none the job names, one listing per directory
    while it does not change, a changed directory read again (within the time budget), and an
    input with too many siblings stages none of them."""
    d = tmp_path / "ref"
    d.mkdir()
    for n in ["genome.fa", "genome.fa.fai", "genome.fa.bwt", "genome.dict", "genome.fa.out"]:
        (d / n).write_text(n)
    (d / "genome.fa.d").mkdir()  # a directory: not staged
    past = time.time() - 10
    os.utime(d, (past, past))
    fa, out = str(d / "genome.fa"), str(d / "genome.fa.out")
    listings = Listings()
    sibs, listed, over = find_siblings([fa], {fa, out}, listings)
    assert sorted(os.path.basename(p) for p in sibs) == ["genome.dict", "genome.fa.bwt", "genome.fa.fai"]
    assert listed == {str(d): os.stat(d).st_mtime_ns} and over == 0
    find_siblings([fa], {fa, out}, listings)
    assert listings.reads == 1
    # a new index file: the directory changed. With no time left in the budget the old listing
    # is used but not vouched for (the job reads the directory itself)...
    stale = Listings(budget=0.0)
    stale.get(str(d))
    assert stale.spent > 0
    (d / "genome.fa.pac").write_text("pac")
    os.utime(d, (past + 2, past + 2))
    sibs, listed, _ = find_siblings([fa], {fa}, stale)
    assert "genome.fa.pac" not in [os.path.basename(p) for p in sibs] and listed == {}
    assert stale.reads == 1
    # ...and with time in the budget it is read again
    fresh = Listings(budget=1e9)
    fresh.get(str(d))
    (d / "genome.fa.ann").write_text("ann")
    os.utime(d, (past + 3, past + 3))
    sibs, listed, _ = find_siblings([fa], {fa}, fresh)
    assert "genome.fa.ann" in [os.path.basename(p) for p in sibs] and fresh.reads == 2
    # listings kept within a number of names: the one used longest ago is dropped
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.fa").write_text("")
    small = Listings(budget=1e9, max_names=len(os.listdir(d)) + 1)
    small.get(str(d))
    small.get(str(other))
    assert list(small.dirs) == [str(d), str(other)]
    small.get(str(other))
    (other / "y.fa").write_text("")
    small.get(str(other))
    assert list(small.dirs) == [str(other)] and small.held == 2
    # too many files sharing the input's name: none staged, the directory not vouched for
    for i in range(MAX_SIBLINGS + 1):
        (d / f"chunk.{i}").write_text("")
    (d / "chunk").write_text("")
    os.utime(d, (past + 4, past + 4))
    sibs, listed, over = find_siblings([str(d / "chunk"), fa], set(), Listings())
    assert over == 1 and not any("chunk" in p for p in sibs) and listed == {}


def _task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: Path, staged: List[str], named: List[str], listed: bool) -> Path:
    """Sets the environment of a diffuse task whose worker staged ``staged`` (names in ``shared``,
    copied: the staged copies are other files than the shared ones) and returns its directory."""
    task = tmp_path / "task"
    for i, n in enumerate(staged):
        (task / "inputs" / str(i)).mkdir(parents=True)
        shutil.copy2(shared / n, task / "inputs" / str(i) / n)
    told = {
        "inputs": [str(shared / n) for n in staged],
        "listed": {str(shared): os.stat(shared).st_mtime_ns if listed else 1},
        "named": [str(shared / n) for n in named],
    }
    monkeypatch.setenv(ENV_STAGED, str(task / "inputs"))
    monkeypatch.setenv(ENV_INPUTS, json.dumps(told))
    return task


def _object(query: Path, tmp_path: Path) -> StorageObject:
    provider = StorageProvider(local_prefix=tmp_path / "prefix", logger=logging.getLogger("test"))
    return StorageObject(query=str(query), keep_local=False, retrieve=True, provider=provider)


@pytest.mark.parametrize("listed", [True, False])
def test_siblings_placed_beside_the_local_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: bool) -> None:
    """The job's side: staged siblings are hard links of the staged copies; with the directory
    unchanged since the executor listed it nothing else is looked for, otherwise the directory
    is read and the siblings not staged are symbolic links to the shared paths; a file the job
    names is never placed; cleanup removes what was placed."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for n in ["genome.fa", "genome.fa.bwt", "genome.fa.fai", "genome.dict", "genome.fa.out"]:
        (shared / n).write_text(n)
    task = _task(tmp_path, monkeypatch, shared, ["genome.fa", "genome.fa.bwt", "genome.fa.fai"],
                 ["genome.fa", "genome.fa.out"], listed)
    obj = _object(shared / "genome.fa", tmp_path)
    obj.retrieve_object()
    local = obj.local_path()
    assert str(local).startswith(str(task / "snakemake-storage"))
    for i, n in enumerate(["genome.fa", "genome.fa.bwt", "genome.fa.fai"]):
        assert os.path.samefile(local.parent / n, task / "inputs" / str(i) / n), n
    assert not (local.parent / "genome.fa.out").exists()  # the job's output
    dict_ = local.parent / "genome.dict"
    if listed:
        assert not os.path.lexists(dict_)  # the executor vouched that all siblings were staged
    else:
        assert dict_.is_symlink() and os.readlink(dict_) == str(shared / "genome.dict")
    obj.cleanup()
    assert sorted(p.name for p in local.parent.iterdir()) == ["genome.fa"]


def test_siblings_placed_outside_a_task_are_links_to_the_shared_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a task (a local rule in the main process): the input is copied from the shared
    path, its siblings are symbolic links to theirs, and an output stored over a sibling the
    rule wrote through such a link keeps the bytes written."""
    monkeypatch.delenv(ENV_STAGED, raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    for n in ["A.bam", "A.bam.bai"]:
        (shared / n).write_text(n)
    obj = _object(shared / "A.bam", tmp_path)
    obj.retrieve_object()
    bai = obj.local_path().parent / "A.bam.bai"
    assert bai.is_symlink() and os.readlink(bai) == str(shared / "A.bam.bai")
    out = _object(shared / "A.bam.bai", tmp_path)  # the same path as a rule's output
    assert out.local_path() == bai
    bai.write_text("new index")
    out.store_object()
    assert (shared / "A.bam.bai").read_text() == "new index" and not (shared / "A.bam.bai").is_symlink()


@pytest.mark.parametrize("order", ["data first", "index first"])
def test_an_index_newer_than_its_data_stays_newer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """The worker's copies carry the time they were fetched: a .bai fetched before its .bam
    would look older than it (htslib warns, GATK 4 refuses). The local index is then a copy one
    second newer than the local data, whichever is retrieved first; the staged (cached) copy
    is left as it was."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "A.bam").write_text("bam")
    (shared / "A.bam.bai").write_text("bai")
    os.utime(shared / "A.bam", (1000, 1000))
    os.utime(shared / "A.bam.bai", (2000, 2000))
    task = _task(tmp_path, monkeypatch, shared, ["A.bam", "A.bam.bai"], ["A.bam", "A.bam.bai"], True)
    staged_bam, staged_bai = task / "inputs" / "0" / "A.bam", task / "inputs" / "1" / "A.bam.bai"
    os.utime(staged_bam, (5000, 5000))  # fetched after the index
    os.utime(staged_bai, (4000, 4000))
    objs = [_object(shared / n, tmp_path) for n in ("A.bam", "A.bam.bai")]
    for o in objs if order == "data first" else objs[::-1]:
        o.retrieve_object()
    bam, bai = (o.local_path() for o in objs)
    assert os.path.samefile(bam, staged_bam)
    assert not os.path.samefile(bai, staged_bai) and bai.read_text() == "bai"
    assert os.stat(bai).st_mtime == 5001 and os.stat(staged_bai).st_mtime == 4000
    # an index older than its data on the shared file system stays so
    os.utime(shared / "A.bam.bai", (500, 500))
    tmp2 = tmp_path / "again"
    tmp2.mkdir()
    task = _task(tmp2, monkeypatch, shared, ["A.bam", "A.bam.bai"], ["A.bam", "A.bam.bai"], True)
    os.utime(task / "inputs" / "0" / "A.bam", (5000, 5000))
    os.utime(task / "inputs" / "1" / "A.bam.bai", (4000, 4000))
    objs = [_object(shared / n, tmp2) for n in ("A.bam", "A.bam.bai")]
    for o in objs:
        o.retrieve_object()
    assert os.path.samefile(objs[1].local_path(), task / "inputs" / "1" / "A.bam.bai")


# ---------------------------------------------------------------- Snakemake semantics


SEMANTICS = """
rule all:
    input: "final.txt", "prot.txt", "shadowed.txt", "cores.txt", "benched.txt", "scripted.txt"
rule make_temp:
    input: "data/in0.bin"
    output: temp("tmp.txt")
    log: "logs/make_temp.log"
    shell: "sha256sum < {input} | cut -c1-64 > {output}; echo made temp >&2 2> {log}; echo wrote {output} > {log}"
rule final:
    input: "tmp.txt"
    output: "final.txt"
    shell: "cp {input} {output}"
rule prot:
    input: "data/in1.bin"
    output: protected("prot.txt")
    shell: "wc -c < {input} > {output}"
rule shadowed:
    input: "data/in0.bin"
    output: "shadowed.txt"
    shadow: "minimal"
    shell: "wc -c < {input} > junk.txt; cp junk.txt {output}"
rule cores:
    output: "cores.txt"
    threads: 2
    resources: mem_mb=100
    shell: "echo $DIFFUSE_CORES {threads} > {output}"
rule benched:
    output: "benched.txt"
    benchmark: "benchmarks/benched.tsv"
    shell: "echo benched > {output}"
rule scripted:
    input: "data/in1.bin"
    output: "scripted.txt"
    script: "scripted.py"
"""

#: The script of the ``script:`` rule (run by the job's Snakemake in a new interpreter).
SCRIPTED = "with open(snakemake.input[0], 'rb') as f, open(snakemake.output[0], 'w') as out:\n    out.write(str(len(f.read())))\n"


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_temp_protected_shadow_log_threads_benchmark_script(cluster: Cluster, tmp_path: Path, path: str) -> None:
    inputs = write_inputs(tmp_path / "data", 2, 10_000)
    (tmp_path / "Snakefile").write_text(SEMANTICS)
    (tmp_path / "scripted.py").write_text(SCRIPTED)
    run_snakemake(cluster, tmp_path, *CACHED, "--cores", "4", *PATHS[path])
    assert (tmp_path / "final.txt").read_text().strip() == sha(inputs[0])
    assert not (tmp_path / "tmp.txt").exists(), "temp() output not removed after its consumer"
    prot = tmp_path / "prot.txt"
    assert prot.read_text().strip() == "10000"
    assert not os.stat(prot).st_mode & 0o222, "protected() output is writable"
    assert (tmp_path / "shadowed.txt").read_text().strip() == "10000"
    assert not (tmp_path / "junk.txt").exists(), "a shadow rule's scratch file leaked"
    # the job sees its local copies (the storage plugin's paths: the task's scratch directory,
    # then the path as written), as with any Snakemake storage plugin
    logged = (tmp_path / "logs" / "make_temp.log").read_text().strip()
    assert logged.startswith("wrote /") and logged.endswith("/snakemake-storage/tmp.txt"), logged
    assert (tmp_path / "cores.txt").read_text().split() == ["2", "2"]
    # benchmark: files and script: rules (the script in a new interpreter the job starts)
    assert (tmp_path / "benchmarks" / "benched.tsv").read_text().startswith("s\th:m:s\t")
    assert (tmp_path / "benched.txt").read_text() == "benched\n"
    assert (tmp_path / "scripted.txt").read_text() == "10000"
    # nothing left to do: Snakemake's own bookkeeping (metadata, mtimes) holds
    p = run_snakemake(cluster, tmp_path, *CACHED, "-n")
    assert "Nothing to be done" in p.stdout + p.stderr


# ---------------------------------------------------------------- reruns and reuse


RERUN = """
rule all:
    input: "summary.txt"
rule digest:
    input: "data/in{i}.bin"
    output: "digest/{i}.txt"
    shell: "sha256sum < {input} | cut -c1-64 > {output}"
rule summary:
    input: expand("digest/{i}.txt", i=range(3))
    output: "summary.txt"
    shell: "cat {input} > {output}"
"""


def test_rerun_after_one_input_changes_and_reuse_does_not_contradict(
    reuse_cluster: Cluster, tmp_path: Path
) -> None:
    """On a dispatcher that keeps results for reuse (``--reuse on``): changing one input reruns
    exactly the jobs Snakemake's dry run names (its digest and the summary), with the new bytes;
    a forced rerun (``-R digest``) of jobs whose inputs did not change runs them (diffuse does
    not stand a kept result in, which would write no output: the tasks carry ``reuse: false``)."""
    cluster = reuse_cluster
    client = cluster.client()
    inputs = write_inputs(tmp_path / "data", 3, 50_000)
    (tmp_path / "Snakefile").write_text(RERUN)
    run_snakemake(cluster, tmp_path, *CACHED)
    first = (tmp_path / "summary.txt").read_text().split()
    assert first == [sha(p) for p in inputs]

    time.sleep(1.1)  # a new modification time, whatever the file system's resolution
    inputs[1].write_bytes(os.urandom(50_000))
    dry = run_snakemake(cluster, tmp_path, *CACHED, "-n", "--quiet", "rules")
    planned = sorted(set(re.findall(r"^(digest|summary)\s+(\d+)$", dry.stdout, re.M)))
    assert planned == [("digest", "1"), ("summary", "1")], dry.stdout
    mtimes = [(tmp_path / "digest" / f"{i}.txt").stat().st_mtime for i in range(3)]
    since = client.status().submitted - 1
    run_snakemake(cluster, tmp_path, *CACHED)
    ran = sorted(rules_run(client, since))
    assert ran == ["digest", "summary"], ran
    after = [(tmp_path / "digest" / f"{i}.txt").stat().st_mtime for i in range(3)]
    assert after[0] == mtimes[0] and after[2] == mtimes[2] and after[1] > mtimes[1]
    assert (tmp_path / "summary.txt").read_text().split() == [sha(p) for p in inputs]

    # Snakemake forces the three digests again: diffuse runs all three (none reused)
    reused_before = client.status().reused
    digests = tmp_path / "digest" / "0.txt"
    mtime = digests.stat().st_mtime
    since = client.status().submitted - 1
    run_snakemake(cluster, tmp_path, *CACHED, "-R", "digest")
    ran = sorted(rules_run(client, since))
    assert ran == ["digest"] * 3 + ["summary"], ran
    assert client.status().reused == reused_before
    assert digests.stat().st_mtime > mtime
    for t in client.iter_tasks(after=since):
        assert t.outcome is not None and t.outcome.reused_from is None
    assert (tmp_path / "summary.txt").read_text().split() == [sha(p) for p in inputs]


# ---------------------------------------------------------------- jobs run warm


#: Each job records the process it runs in: the shell rule its shell's parent (the job's
#: Snakemake) and that one's parent; the run: rule (in the job's Snakemake itself) its parent,
#: and what a fresh interpreter would show (argv, sys.path[0], SIGINT's handler, hash seed).
WHO = r"""
rule all:
    input: "shell.txt", "run.txt"
rule shell_rule:
    output: "shell.txt"
    shell: "P=$PPID; PP=$(cut -d' ' -f4 /proc/$P/stat); tr '\\0' ' ' < /proc/$PP/cmdline > {output}"
rule run_rule:
    output: "run.txt"
    run:
        import json, os, signal, sys
        ppid = os.getppid()
        with open(f"/proc/{ppid}/cmdline") as f:
            parent = f.read().replace("\0", " ")
        with open(output[0], "w") as f:
            json.dump({"parent": parent, "argv0": sys.argv[0], "path0": sys.path[0], "cwd": os.getcwd(),
                       "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                       "pgid_is_pid": os.getpgid(0) == os.getpid()}, f)
"""


def _warm_calls(client: Client) -> int:
    return int((client.status().raw.get("warm") or {}).get("calls", 0))


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_jobs_run_in_a_child_of_the_warm_snakemake(cluster: Cluster, tmp_path: Path, path: str) -> None:
    """Warm (the default): each job's Snakemake is a child of the worker's warm process
    (``python -m diffuse_client.warm``), the worker counts a call per job, and the job sees what
    ``cd <workdir> && python -m snakemake ...`` would show it: ``sys.argv[0]`` Snakemake's
    ``__main__.py``, ``sys.path[0]`` and the run directory the working directory, SIGINT as
    KeyboardInterrupt. Cold: the job's Snakemake is a child of the shell of its command."""
    client = cluster.client()
    (tmp_path / "Snakefile").write_text(WHO)
    job = unique("smk-who")
    calls = _warm_calls(client)
    run_snakemake(cluster, tmp_path, *CACHED, "--diffuse-job", job, *PATHS[path])
    assert client.job(job).succeeded == 2
    shell_parent = (tmp_path / "shell.txt").read_text()
    run = json.loads((tmp_path / "run.txt").read_text())
    if path == "warm":
        assert "-m diffuse_client.warm --mode fork" in shell_parent, shell_parent
        assert "-m diffuse_client.warm --mode fork" in run["parent"], run
        wait_until(lambda: _warm_calls(client) >= calls + 2, 10, "the workers' count of warm calls")
    else:
        assert "diffuse_client.warm" not in shell_parent and "diffuse_client.warm" not in run["parent"]
        assert run["parent"].startswith("sh -c "), run
    assert run["argv0"].endswith("/snakemake/__main__.py"), run
    assert run["path0"] == str(tmp_path) and run["cwd"] == str(tmp_path) and run["sigint"], run
    for log in (tmp_path / ".snakemake" / "diffuse_logs").rglob("*.log"):
        text = log.read_text()
        assert f"Run directory: {tmp_path}\n" in text, text[-2000:]
        # the job's Snakemake ended at once, not a second later (its rate limiter's timer)
        assert "Finished jobid" in text
    assert run["pgid_is_pid"] == (path == "warm")  # a cold job's group is led by its shell


def test_a_job_whose_interpreter_settings_differ_runs_in_a_new_interpreter(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable the interpreter reads only at its start (here ``PYTHONHASHSEED``, passed with
    ``--envvars``) cannot take effect in a forked child: such a job runs ``python -m snakemake``
    as a new process from the warm child, and sees it (the string hashes of that seed), as a
    cold job does."""
    (tmp_path / "Snakefile").write_text(
        'rule h:\n    output: "h.txt"\n    run:\n'
        '        import os\n'
        '        open(output[0], "w").write(f"{hash(\'diffuse\')} {os.environ.get(\'PYTHONHASHSEED\')}")\n'
    )
    seeded = subprocess.run(
        [sys.executable, "-c", "print(hash('diffuse'))"], env=dict(os.environ, PYTHONHASHSEED="123"),
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    monkeypatch.setenv("PYTHONHASHSEED", "123")  # the main Snakemake's, passed on to the job
    run_snakemake(cluster, tmp_path, *CACHED, "--envvars", "PYTHONHASHSEED")
    assert (tmp_path / "h.txt").read_text().split() == [seeded, "123"]
    log = next((tmp_path / ".snakemake" / "diffuse_logs" / "h").glob("*.log")).read_text()
    assert "diffuse: PYTHONHASHSEED differ(s) from the warm process's" in log, log[-2000:]


def test_a_worker_that_cannot_start_a_warm_snakemake_is_recognised(cluster: Cluster, tmp_path: Path) -> None:
    """The failures after which the executor runs a job cold instead (and the rest of the run):
    the worker's own errors for an interpreter that does not exist and for a warm process whose
    preload fails (Snakemake or the plugin missing there); a job that failed is not one."""
    client = cluster.client()
    fn = client.put_blob(warm_entry.FUNCTION)
    args = base64.b64encode(warm_entry.encode_args(["--version"], staged=False)).decode()
    base = {"fn": 0, "entry": warm_entry.ENTRY, "args": args}
    ids = {k: unique(f"warm-{k}") for k in ("nopython", "nopreload", "ran", "failed")}
    client.submit_many([
        Task(id=ids["nopython"], inputs=[fn], call={**base, "python": str(tmp_path / "no-python")}),
        Task(id=ids["nopreload"], inputs=[fn], call={**base, "python": sys.executable, "preload": ["no_such_module_here"]}),
        Task(id=ids["ran"], inputs=[fn], cwd=str(tmp_path), call={**base, "python": sys.executable, "preload": list(warm_entry.PRELOAD)}),
        Task(id=ids["failed"], inputs=[fn], cwd=str(tmp_path), call={
            **base, "python": sys.executable, "preload": list(warm_entry.PRELOAD),
            "args": base64.b64encode(warm_entry.encode_args(["--no-such-option"], staged=False)).decode(),
        }),
    ])
    got = client.wait(list(ids.values()), timeout=120)
    seen = {k: _is_warm_start_failure(got[i]) for k, i in ids.items()}
    assert seen == {"nopython": True, "nopreload": True, "ran": False, "failed": False}, {
        k: (got[i].state, got[i].outcome and got[i].outcome.error) for k, i in ids.items()
    }
    assert got[ids["ran"]].state == "succeeded"
    assert client.logs(ids["ran"]).strip() == "9.27.0"
    failed = got[ids["failed"]]
    assert failed.state == "failed" and failed.outcome is not None and failed.outcome.exit_code == 2


def test_job_commands_become_snakemake_arguments() -> None:
    """The arguments of a warm job are those the cold command's shell would pass to
    ``python -m snakemake``; a command that is more than that runs cold."""
    py = "/venv/bin/python"
    cmd = f"{py} -m snakemake --snakefile '/w/Snakefile' --target-jobs 'a:i=1' --cores 2 --force-use-threads --mode 'remote'"
    assert snakemake_argv(cmd, py) == [
        "--snakefile", "/w/Snakefile", "--target-jobs", "a:i=1", "--cores", "2", "--force-use-threads", "--mode", "remote",
    ]
    assert snakemake_argv(f"export A='x y' B='2' && {cmd}", py) == snakemake_argv(cmd, py)
    assert snakemake_argv(f"module load x && {cmd}", py) is None  # a precommand
    assert snakemake_argv(f"export A='1' && module load x && {cmd}", py) is None
    assert snakemake_argv(cmd.replace(py, "python"), py) is None  # another interpreter
    assert snakemake_argv(cmd + " --config 'x=\"$HOME\"'", py) is None  # the shell might expand it
    assert snakemake_argv(cmd + " && touch done", py) is None
    assert parse_bool("False") is False and parse_bool("on") is True and parse_bool(True) is True


# ---------------------------------------------------------------- failures, cancel, status


@pytest.mark.parametrize("path", ["warm", "cold"])
def test_failure_reports_diffuse_reason_and_log(cluster: Cluster, tmp_path: Path, path: str) -> None:
    """A failed job's error names diffuse's reason (the task's exit code: 1, as the job's
    Snakemake exits after its rule's shell command exited 3), its log, and the end of its
    stderr, where Snakemake's own error names the command's exit status."""
    (tmp_path / "Snakefile").write_text(
        'rule bad:\n    output: "x.txt"\n    shell: "echo going wrong >&2; exit 3"\n'
    )
    p = run_snakemake(cluster, tmp_path, *PATHS[path], check=False)
    assert p.returncode != 0
    err = p.stdout + p.stderr
    assert "exit code 3" in err or "exit status 3" in err, err[-3000:]
    assert re.search(r"diffuse task smk-\S+ failed, on w\d, exit code 1; log: \S+/bad/\d+\.log", err), err[-3000:]
    assert "end of its stderr:" in err and "going wrong" in err, err[-3000:]
    logs = list((tmp_path / ".snakemake" / "diffuse_logs" / "bad").glob("*.log"))
    assert logs and "going wrong" in logs[0].read_text()


def test_ctrl_c_cancels_the_running_tasks(cluster: Cluster, tmp_path: Path) -> None:
    client = cluster.client()
    job = unique("smk-cancel")
    (tmp_path / "Snakefile").write_text(
        'rule all:\n    input: expand("s{i}.txt", i=range(3))\n'
        'rule s:\n    output: "s{i}.txt"\n    shell: "sleep 120; touch {output}"\n'
    )
    env = dict(os.environ, DIFFUSE_DISPATCHER=cluster.url, DIFFUSE_CLIENT_TOKEN=cluster.client_token)
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--executor", "diffuse", "--jobs", "3", "--diffuse-job", job],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        # SIGINT's default action whatever the test run inherited. A run started with `&` from a
        # non-interactive shell inherits SIGINT ignored, and Python then installs no
        # KeyboardInterrupt handler: Snakemake would never see the Ctrl-C (measured: without
        # this line the test fails when started that way, with Snakemake's log ending at
        # "Execute 3 jobs...").
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        def running() -> bool:
            try:
                return client.job(job).running == 3
            except Exception:
                return False

        try:
            wait_until(running, 60, "three running jobs")
        except BaseException:
            proc.kill()
            raise AssertionError(f"three tasks never ran; Snakemake said:\n{proc.communicate()[1][-6000:]}")
        time.sleep(2)  # the three Snakemake jobs have started in their tasks
        proc.send_signal(signal.SIGINT)
        try:
            # Reading its stderr as it goes: a full pipe would block it.
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"Snakemake did not stop within 60 s of SIGINT:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: client.job(job).cancelled == 3, 30, "the three tasks cancelled")
    assert not any((tmp_path / f"s{i}.txt").exists() for i in range(3))


def test_status_of_many_tasks_in_one_request(cluster: Cluster, requests_seen: Counter[str]) -> None:
    """The poll behind ``check_active_jobs`` (``Client.states``): 300 tasks' states in one
    request; ids the dispatcher does not know told apart; over 10,000 ids, a second request."""
    client = cluster.client()
    prefix = unique("poll")
    ids = [f"{prefix}-{i}" for i in range(300)]
    client.submit_many([Task(id=t, cmd="true", reuse=False) for t in ids])
    client.wait(ids, timeout=120, poll=0.2)
    before = requests_seen["POST /v1/states"]
    states, unknown = client.states(ids + ["nope"])
    assert requests_seen["POST /v1/states"] - before == 1
    assert unknown == ["nope"]
    assert len(states) == 300 and all(t.state == "succeeded" for t in states.values())
    before = requests_seen["POST /v1/states"]
    strangers = [f"{prefix}-none-{i}" for i in range(9_800)]
    states, unknown = client.states(ids + strangers)
    assert requests_seen["POST /v1/states"] - before == 2
    assert len(states) == 300 and unknown == strangers


def test_resources_map_to_task_fields() -> None:
    f = task_resources(4, {"mem_mb": 2000, "runtime": 30, "gpu": 1, "disk_mb": 5})
    assert f == {
        "cores": 4, "memory": "2000MB", "memory_limit": "none",
        "timeout_s": 1800.0, "walltime_s": 1800.0, "gpus": 1,
    }
    assert task_resources(1, {"mem_mib": 512}, enforce_memory=True) == {"cores": 1, "memory": "512MiB"}
    assert task_resources(0, {}) == {"cores": 1}
