#!/usr/bin/env python3
"""Structure check: long files, long functions and import circles between files.

    python3 scripts/structure.py [--files N] [--functions N] [--list-functions N] [DIR...]

Prints, for the Rust and Python sources under DIR (default: crates/, python/src/ and the
Snakemake plugins' python/snakemake-executor-plugin-diffuse/src/):

- every file over `--files` lines (default 1,000);
- every function over `--functions` lines (default 150), counted from its `fn`/`def` line to
  its closing brace (Rust, as rustfmt lays it out) or its last line (Python);
- every clock read in the live scheduler (crates/diffuse-runtime/src/dispatcher/scheduler/,
  its tests left out) outside clock.rs, the one module that reads it, and writer.rs, the journal
  writer's own thread behind the Comm seam: `Instant::now`, `SystemTime::now` or `.elapsed()`.
  The scheduler is handed the time with each step, as the core is;
- every import circle between files: groups of files that reach each other through `use`
  paths (`crate::`, `super::`, `self::`, a child module's name, a name re-exported by the
  module a path ends in), through an inherent `impl T` block in another file than T's own
  (the type's behaviour then lives where its owner cannot see it), or, for Python, through
  `import`s (also those inside functions). Test modules (`mod tests`, files named tests.rs or
  under a tests/ folder) are left out: a test may read what it tests.

Exits 1 if anything is over a limit or in a circle, so that a test can hold the line.
It reads text; it does not run rustc. Paths it cannot resolve are ignored, not guessed.
"""

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# ----- Rust -----

def strip_rust(text):
    """Blanks comments and string/char literals, keeping line breaks (line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j]) + '"')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code):
    """Blanks `#[cfg(test)] mod x { ... }` blocks (rustfmt layout: the closing brace at the
    indent of `mod`)."""
    lines = code.split("\n")
    k = 0
    while k < len(lines):
        if lines[k].strip() == "#[cfg(test)]" and k + 1 < len(lines):
            m = re.match(r"(\s*)(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{\s*$", lines[k + 1])
            if m:
                indent = m.group(1)
                end = k + 2
                while end < len(lines) and lines[end] != indent + "}":
                    end += 1
                for j in range(k, min(end + 1, len(lines))):
                    lines[j] = ""
                k = end
        k += 1
    return "\n".join(lines)


FN_RE = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern\s+\"\w+\")\s+)*fn\s+(\w+)")


def rust_functions(path, code):
    lines = code.split("\n")
    for k, line in enumerate(lines):
        m = FN_RE.match(line)
        if not m:
            continue
        indent = m.group(1)
        rest = "\n".join(lines[k:k + 40])
        brace, semi = rest.find("{"), rest.find(";")
        if brace < 0 or (0 <= semi < brace):
            continue
        first = lines[k].rstrip()
        if "{" in first and first.endswith("}"):
            yield m.group(6), k + 1, 1
            continue
        end = k + 1
        while end < len(lines) and lines[end] != indent + "}":
            end += 1
        yield m.group(6), k + 1, end - k + 1


def module_of(src, path):
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def use_paths(tree):
    """Expands a `use` tree (`a::{b, c::d as e}`) into paths."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def expand(prefix, t):
        depth, start, items = 0, 0, []
        if "{" not in t:
            return [prefix + t]
        head, body = t.split("{", 1)
        body = body[: body.rfind("}")]
        for j, ch in enumerate(body):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(body[start:j])
                start = j + 1
        items.append(body[start:])
        out = []
        for it in items:
            if it:
                out += expand(prefix + head, it)
        return out

    return [p for p in expand("", tree) if p]


def rust_crate_graph(src, files):
    mods = {module_of(src, f): f for f in files}
    codes = {f: drop_test_modules(strip_rust(f.read_text(errors="replace"))) for f in files}
    # Names each module re-exports: `pub use a::b::Name` (and `pub use x::*`).
    reexports = defaultdict(dict)
    types = defaultdict(set)
    for f, code in codes.items():
        mod = module_of(src, f)
        for m in re.finditer(r"\bpub(\([^)]*\))?\s+use\s+([^;]+);", code):
            for p in use_paths(m.group(2)):
                target = resolve(mods, mod, p.split("::"))
                if target is not None:
                    reexports[mod][p.split("::")[-1]] = target
        for m in re.finditer(r"^\s*(pub(\([^)]*\))?\s+)?(struct|enum|type|trait|union)\s+(\w+)", code, re.M):
            types[m.group(4)].add(f)
    edges = defaultdict(set)
    why = {}
    for f, code in codes.items():
        mod = module_of(src, f)
        children = {m[len(mod)] for m in mods if len(m) == len(mod) + 1 and m[: len(mod)] == mod}
        paths = []
        # Inside an inline `mod x { ... }`, `super::` is this file's own module: drop one.
        inline = inline_module_spans(code)

        def local(path, at):
            if path.startswith("super::") and any(a <= at < b for a, b in inline):
                return "self::" + path[len("super::"):]
            return path

        for m in re.finditer(r"\buse\s+([^;]+);", code):
            paths += [local(p, m.start()) for p in use_paths(m.group(1))]
        for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+|(?:crate|super|self)::\*)", code):
            paths.append(local(m.group(1), m.start()))
        for c in children:
            paths += re.findall(r"(?<![\w:])(" + c + r"(?:::\w+)+)", code)
        for p in paths:
            segs = p.split("::")
            if segs[0] not in ("crate", "super", "self") and segs[0] not in children:
                continue
            target = resolve(mods, mod, segs, reexports)
            if target is not None and target != mod and target in mods:
                edges[f].add(mods[target])
                why.setdefault((f, mods[target]), p)
        for m in re.finditer(r"^\s*impl(<[^>]*>)?\s+(\w+)\b(?![^{\n]*\bfor\b)", code, re.M):
            owners = types.get(m.group(2), set()) - {f}
            if len(owners) == 1 and m.group(2) not in types or len(owners) == 1 and f not in types[m.group(2)]:
                o = next(iter(owners))
                edges[f].add(o)
                edges[o].add(f)
                why.setdefault((f, o), "impl " + m.group(2))
                why.setdefault((o, f), "impl " + m.group(2) + " (elsewhere)")
    return edges, why


def inline_module_spans(code):
    """Character spans of inline `mod x { ... }` blocks (rustfmt layout)."""
    spans = []
    for m in re.finditer(r"^(\s*)(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{\s*$", code, re.M):
        close = re.compile("^" + m.group(1) + "}", re.M).search(code, m.end())
        spans.append((m.end(), close.start() if close else len(code)))
    return spans


def resolve(mods, mod, segs, reexports=None):
    """The module (a key of `mods`) a path starting in `mod` lands in, or None."""
    segs = [s for s in segs if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] == "super":
        base, rest = mod, segs
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    elif segs[0] == "self":
        base, rest = mod, segs[1:]
    else:
        base, rest = mod, segs
    cur = base
    for s in rest:
        if cur + (s,) in mods:
            cur = cur + (s,)
        elif reexports is not None and s in reexports.get(cur, {}):
            return reexports[cur][s]
        else:
            break
    return cur if cur in mods else None


def rust_sources(dirs):
    """(src dir, files) per crate, test modules and tests/ folders left out. A folder inside a
    crate's src/ is read as part of its crate (circles are between its files and the crate's)."""
    for d in dirs:
        d = Path(d).resolve()
        crates = [lib.parent for lib in sorted(d.rglob("Cargo.toml")) if "target" not in lib.parts]
        inside = None
        if not crates:
            inside = next((p for p in [d, *d.parents] if (p / "Cargo.toml").is_file()), None)
            crates = [inside] if inside else []
        for krate in crates:
            src = krate / "src"
            if not src.is_dir():
                continue
            files = [
                f for f in sorted(src.rglob("*.rs"))
                if f.name != "tests.rs" and "tests" not in f.relative_to(src).parts[:-1]
            ]
            yield src, files


def within(d, comp):
    """Whether a circle touches folder `d`."""
    return any(str(f).startswith(str(d)) for f in comp)


# ----- Python -----

def python_graph(pkg_dirs):
    edges, why = defaultdict(set), {}
    for pkg in pkg_dirs:
        files = {f.stem: f for f in pkg.glob("*.py")}
        for f in files.values():
            tree = ast.parse(f.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.ImportFrom) and node.level == 1:
                    names = [node.module] if node.module else [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(pkg.name + "."):
                    names = [node.module.split(".")[1]]
                elif isinstance(node, ast.Import):
                    names = [a.name.split(".")[1] for a in node.names if a.name.startswith(pkg.name + ".")]
                for n in names:
                    if n in files and files[n] != f:
                        edges[f].add(files[n])
                        why.setdefault((f, files[n]), "import " + n)
    return edges, why


def python_functions(files):
    for f in files:
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f, node.name, node.lineno, node.end_lineno - node.lineno + 1


# ----- circles -----

def circles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


SCHEDULER = ROOT / "crates/diffuse-runtime/src/dispatcher/scheduler"
CLOCK_READ = re.compile(r"\b(?:Instant|SystemTime)::now\b|\.elapsed\(\)")


def clock_reads(files):
    """(file, line, text) of each clock read in the scheduler outside its clock and writer."""
    out = []
    for f in files:
        if f.suffix != ".rs" or SCHEDULER not in f.parents or f.name in ("clock.rs", "writer.rs"):
            continue
        if "tests" in f.relative_to(SCHEDULER).parts:
            continue
        code = drop_test_modules(strip_rust(f.read_text(errors="replace")))
        for i, line in enumerate(code.split("\n"), 1):
            if CLOCK_READ.search(line):
                out.append((f, i, line.strip()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", default=["crates", "python/src", "python/snakemake-executor-plugin-diffuse/src"])
    ap.add_argument("--files", type=int, default=1000, help="most lines a file may have")
    ap.add_argument("--functions", type=int, default=150, help="most lines a function may have")
    ap.add_argument("--list-functions", type=int, default=0, metavar="N",
                    help="also list the N longest functions")
    a = ap.parse_args()
    dirs = [ROOT / d if not Path(d).is_absolute() else Path(d) for d in a.dirs]
    rel = lambda p: str(Path(p).relative_to(ROOT)) if str(p).startswith(str(ROOT)) else str(p)
    bad = 0

    all_files = [f for d in dirs for f in Path(d).rglob("*") if f.suffix in (".rs", ".py")
                 and "target" not in f.parts and "build" not in f.parts and ".venv" not in f.parts]
    long_files = sorted(((len(f.read_text(errors="replace").split("\n")) - 1, f) for f in all_files), reverse=True)
    over = [(n, f) for n, f in long_files if n > a.files]
    print(f"files over {a.files} lines: {len(over)} (of {len(all_files)} files)")
    for n, f in over:
        print(f"  {n:6} {rel(f)}")
    bad += len(over)

    fns = []
    for f in all_files:
        if f.suffix == ".rs":
            code = strip_rust(f.read_text(errors="replace"))
            fns += [(n, f, name, line) for name, line, n in rust_functions(f, code)]
    py = [f for f in all_files if f.suffix == ".py"]
    fns += [(n, f, name, line) for f, name, line, n in python_functions(py)]
    fns.sort(key=lambda x: -x[0])
    over = [x for x in fns if x[0] > a.functions]
    print(f"functions over {a.functions} lines: {len(over)} (of {len(fns)} functions)")
    for n, f, name, line in over:
        print(f"  {n:6} {rel(f)}:{line} {name}")
    bad += len(over)
    if a.list_functions:
        print(f"longest {a.list_functions} functions:")
        for n, f, name, line in fns[: a.list_functions]:
            print(f"  {n:6} {rel(f)}:{line} {name}")

    reads = clock_reads(all_files)
    print(f"clock reads in the scheduler outside clock.rs: {len(reads)}")
    for f, line, text in reads:
        print(f"  {rel(f)}:{line} {text}")
    bad += len(reads)

    edges, why = defaultdict(set), {}
    for d in dirs:
        for src, files in rust_sources([d]):
            e, w = rust_crate_graph(src, files)
            for k, v in e.items():
                edges[k] |= v
            why.update(w)
    pkgs = [p for d in dirs for p in Path(d).rglob("__init__.py") if "build" not in p.parts]
    e, w = python_graph([p.parent for p in pkgs])
    for k, v in e.items():
        edges[k] |= v
    why.update(w)
    found = [c for c in circles(edges) if any(within(Path(d).resolve(), c) for d in dirs)]
    print(f"import circles between files: {len(found)}")
    for comp in found:
        members = set(comp)
        print("  " + " <-> ".join(rel(f) for f in comp))
        for f in comp:
            for g in sorted(edges[f] & members):
                print(f"      {rel(f)} -> {rel(g)}  ({why.get((f, g), '?')})")
    bad += len(found)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
