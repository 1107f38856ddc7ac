#!/usr/bin/env python3
"""The reference manual's machinery (docs/reference/README.md).

    refman.py list DIR
        For meson: one line per page, "stem section name...", where the
        names are those its NAME section lists (each becomes an installed
        man page name: the stem itself, the others symlinks to it).
    refman.py coverage SRC
        Every RCP_API function, every public static inline function and
        every public typedef of SRC/include/rcpipe/*.h is named by some
        page's NAME section; every page has the sections its kind needs,
        says which version it arrived in, is ASCII, and its SEE ALSO
        names only pages that exist.
    refman.py examples SRC BUILD_INCLUDE LIBRARY CC...
        Extracts each page's EXAMPLE block and compiles it against the
        public headers with warnings as errors: a block that defines
        main() is linked against LIBRARY too; any other block is a piece
        of file scope (functions) and is only compiled.
    refman.py man SRC MANDIR
        Runs `man --warnings -l` on the man page built from each page
        and fails on any warning.
    refman.py installed PREFIX
        After `meson install`: every name of the installed public headers
        resolves through `man -w` under PREFIX/share/man (symlinks
        included) and renders without a warning.

Exit status 0 when all is well, 1 with one line per problem otherwise,
77 (meson's "skipped") when a tool the step needs is missing.
"""
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

FUNC_SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "RETURN VALUE", "ERRORS",
                 "THREAD SAFETY", "EXAMPLE", "HISTORY", "SEE ALSO"]
TYPE_SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "EXAMPLE", "HISTORY", "SEE ALSO"]
OVERVIEW_SECTIONS = ["NAME", "DESCRIPTION", "HISTORY", "SEE ALSO"]
ARRIVED = re.compile(r"Arrived in rcpipe (\d+)\.(\d+)\.(\d+)\.")
CFLAGS = ["-std=c11", "-D_DEFAULT_SOURCE", "-pthread", "-Wall", "-Wextra", "-pedantic",
          "-Wstrict-prototypes", "-Wwrite-strings", "-Werror"]


def pages(refdir):
    """Every page: [(path, stem, section, names, {heading: body})]."""
    out = []
    for path in sorted(glob.glob(os.path.join(refdir, "*.md"))):
        stem = os.path.basename(path)[:-3]
        if stem == "README":
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        first = text.split("\n", 1)[0].split()
        section = first[2] if len(first) > 2 and first[0] == "%" else "?"
        sections, order, cur = {}, [], None
        in_code = False
        for line in text.split("\n")[1:]:
            if line.startswith("```"):
                in_code = not in_code
            if not in_code and line.startswith("# "):
                cur = line[2:].strip()
                order.append(cur)
                sections[cur] = ""
            elif cur is not None:
                sections[cur] += line + "\n"
        names = []
        name_line = sections.get("NAME", "").strip().split("\n")[0]
        if " - " in name_line:
            names = [n.strip().strip("\\") for n in name_line.split(" - ")[0].split(",")]
        out.append({"path": path, "stem": stem, "section": section, "names": names,
                    "sections": sections, "order": order, "text": text, "first": first})
    return out


def public_names(src):
    """(functions, types) of the public headers."""
    funcs, types = set(), set()
    for h in sorted(glob.glob(os.path.join(src, "include", "rcpipe", "*.h"))):
        with open(h, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
        flat = re.sub(r"\s+", " ", text)
        for m in re.finditer(r"\bRCP_API [^;{}()]*?\b(rcp_\w+) ?\(", flat):
            funcs.add(m.group(1))
        for m in re.finditer(r"\bstatic inline [^;{}()]*?\b(rcp_[a-z]\w*) ?\(", flat):
            funcs.add(m.group(1))  # header-only public helpers (rcp_libevent_loop)
        for m in re.finditer(r"\btypedef (?:struct|enum) (rcp_[a-z]\w*) ", flat):
            types.add(m.group(1))
        for m in re.finditer(r"\btypedef [^;{}]*?\(\*(rcp_[a-z]\w*)\)", flat):
            types.add(m.group(1))
        for m in re.finditer(r"\} ?(rcp_[a-z]\w*) ?;", flat):
            types.add(m.group(1))
    return funcs, types


def project_version(src):
    with open(os.path.join(src, "meson.build"), encoding="utf-8") as f:
        m = re.search(r"version\s*:\s*'(\d+)\.(\d+)\.(\d+)'", f.read())
    return tuple(int(x) for x in m.groups())


def example_of(page):
    body = page["sections"].get("EXAMPLE", "")
    blocks = re.findall(r"^```c\n(.*?)^```", body, flags=re.S | re.M)
    return blocks


def cmd_list(refdir):
    for p in pages(refdir):
        names = [p["stem"]] + [n for n in p["names"] if n != p["stem"]]
        print(p["stem"], p["section"], *names)
    return 0


def cmd_coverage(src):
    problems = []
    refdir = os.path.join(src, "docs", "reference")
    all_pages = pages(refdir)
    funcs, types = public_names(src)
    if len(funcs) < 10 or len(types) < 5:
        problems.append(f"found only {len(funcs)} functions and {len(types)} types in "
                        f"{src}/include/rcpipe: is the header parser broken?")
    named = {}
    for p in all_pages:
        for n in p["names"]:
            if n in named:
                problems.append(f"{p['stem']}.md: {n} is already named by {named[n]}.md")
            named[n] = p["stem"]
    for n in sorted(funcs - set(named)):
        problems.append(f"function {n} has no page: write docs/reference/{n}.md "
                        f"(or name it in the NAME section of a related page)")
    for n in sorted(types - set(named)):
        problems.append(f"type {n} has no page: write docs/reference/{n}.md "
                        f"(or name it in the NAME section of a related page)")
    version = project_version(src)
    for p in all_pages:
        where = os.path.relpath(p["path"], src)
        first = p["first"]
        if len(first) < 3 or first[0] != "%" or first[1] != p["stem"] or first[2] not in "37":
            problems.append(f"{where}: first line must be '% {p['stem']} 3 ...' (title block)")
        if not p["names"] or p["names"][0] != p["stem"]:
            problems.append(f"{where}: NAME must start with '{p['stem']}' and have ' - '")
        if p["section"] == "7":
            need = OVERVIEW_SECTIONS
        elif any(n in funcs for n in p["names"]):
            need = FUNC_SECTIONS
        else:
            need = TYPE_SECTIONS
        missing = [s for s in need if s not in p["sections"]]
        if missing:
            problems.append(f"{where}: missing section(s) {', '.join(missing)}")
        elif [s for s in p["order"] if s in need] != need:
            problems.append(f"{where}: sections out of order, want {', '.join(need)}")
        for n in p["names"]:
            if n not in funcs and n not in types and n != p["stem"]:
                problems.append(f"{where}: NAME lists {n}, which no public header declares")
            if n in funcs and not re.search(r"\b%s\b" % re.escape(n), p["sections"].get("SYNOPSIS", "")):
                problems.append(f"{where}: {n} is named but not in the SYNOPSIS")
        m = ARRIVED.search(p["sections"].get("HISTORY", ""))
        if not m:
            problems.append(f"{where}: HISTORY must say 'Arrived in rcpipe X.Y.Z.'")
        elif tuple(int(x) for x in m.groups()) > version:
            problems.append(f"{where}: arrived in {'.'.join(m.groups())}, after the project's "
                            f"version {'.'.join(map(str, version))}")
        if "EXAMPLE" in need and len(example_of(p)) != 1:
            problems.append(f"{where}: EXAMPLE must hold exactly one ```c block")
        for i, line in enumerate(p["text"].split("\n"), 1):
            if any(ord(ch) > 126 or (ord(ch) < 32 and ch != "\t") for ch in line):
                problems.append(f"{where}:{i}: not plain ASCII (man pages render it "
                                f"differently by locale)")
        for ref, sec in re.findall(r"\*\*(\w+)\*\*\((\d)\)", p["sections"].get("SEE ALSO", "")):
            if ref not in named:
                problems.append(f"{where}: SEE ALSO names {ref}({sec}), which has no page")
    for p in problems:
        print(p)
    print(f"refman coverage: {len(funcs)} functions, {len(types)} types, "
          f"{len(all_pages)} pages naming {len(named)} names; {len(problems)} problem(s)")
    return 1 if problems else 0


def compile_one(job):
    page, code, cc, incs, lib, tmp = job
    c = os.path.join(tmp, page["stem"] + ".c")
    with open(c, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{page["stem"]}.md EXAMPLE"\n' + code)
    extra = []
    for hdr, pc in (("rcpipe/libevent.h", "libevent"), ("rcpipe/libuv.h", "libuv")):
        if hdr in code:
            r = subprocess.run(["pkg-config", "--cflags", "--libs", pc], capture_output=True,
                               text=True)
            if r.returncode != 0:
                return page["stem"], "skip", f"needs {pc} (pkg-config {pc} not found)"
            extra += r.stdout.split()
    whole = re.search(r"^int main ?\(", code, flags=re.M) is not None
    args = cc + CFLAGS + [f"-I{i}" for i in incs] + [c]
    if whole:
        args += ["-o", c[:-2], lib] + extra
    else:
        args += ["-c", "-o", c[:-2] + ".o"] + [e for e in extra if not e.startswith("-l")]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return page["stem"], "fail", r.stdout + r.stderr
    return page["stem"], "program" if whole else "fragment", ""


def cmd_examples(src, build_inc, lib, cc):
    refdir = os.path.join(src, "docs", "reference")
    jobs = []
    tmp = tempfile.mkdtemp(prefix="rcp-refman-")
    try:
        for p in pages(refdir):
            for code in example_of(p):
                jobs.append((p, code, cc, [os.path.join(src, "include"), build_inc], lib, tmp))
        counts = {"program": 0, "fragment": 0, "skip": 0, "fail": 0}
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
            for stem, kind, out in ex.map(compile_one, jobs):
                counts[kind] += 1
                if kind in ("fail", "skip"):
                    print(f"--- {stem}.md EXAMPLE: {kind}\n{out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"refman examples: {counts['program']} programs linked, {counts['fragment']} "
          f"fragments compiled, {counts['skip']} skipped, {counts['fail']} failed")
    return 1 if counts["fail"] else 0


def man_warnings(args, cwd=None, env_extra=None):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="0")
    env.pop("MANPAGER", None)
    env.pop("PAGER", None)
    env.update(env_extra or {})
    r = subprocess.run(["man", "--warnings", "-P", "cat"] + args, capture_output=True, text=True,
                       cwd=cwd, env=env)
    if r.returncode != 0 or r.stderr.strip():
        return (r.stderr.strip() or f"man exited {r.returncode}") + "\n"
    if not r.stdout.strip():
        return "rendered nothing\n"
    return ""


def cmd_man(src, mandir):
    if not shutil.which("man"):
        print("refman man: no man program (Debian package man-db): skipped")
        return 77
    problems = []
    all_pages = pages(os.path.join(src, "docs", "reference"))
    for p in all_pages:
        built = os.path.join(mandir, f"{p['stem']}.{p['section']}")
        if not os.path.exists(built):
            problems.append(f"{built}: not built (a page added since meson setup? "
                            f"run meson setup --reconfigure)")
            continue
        w = man_warnings(["-l", built])
        if w:
            problems.append(f"{built}:\n{w}")
    for p in problems:
        print(p)
    print(f"refman man: {len(all_pages)} pages rendered, {len(problems)} problem(s)")
    return 1 if problems else 0


def cmd_installed(prefix):
    if not shutil.which("man"):
        print("refman installed: no man program (Debian package man-db)")
        return 1
    funcs, types = public_names(os.path.join(prefix))
    problems = []
    mandir = os.path.join(prefix, "share", "man")
    for n in sorted(funcs | types) + ["rcpipe"]:
        sec = "7" if n == "rcpipe" else "3"
        path = os.path.join(mandir, f"man{sec}", f"{n}.{sec}")
        if not os.path.exists(path):
            problems.append(f"{path}: not installed")
            continue
        w = man_warnings(["-M", mandir, sec, n])
        if w:
            problems.append(f"man {sec} {n}:\n{w}")
    for p in problems:
        print(p)
    print(f"refman installed: {len(funcs | types) + 1} names under {mandir}, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "list":
        return cmd_list(argv[2])
    if len(argv) == 3 and argv[1] == "coverage":
        return cmd_coverage(argv[2])
    if len(argv) >= 6 and argv[1] == "examples":
        return cmd_examples(argv[2], argv[3], argv[4], argv[5:])
    if len(argv) == 4 and argv[1] == "man":
        return cmd_man(argv[2], argv[3])
    if len(argv) == 3 and argv[1] == "installed":
        return cmd_installed(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
