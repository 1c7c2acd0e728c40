#!/usr/bin/env python3
"""Helpers of benches/peers.sh: split a bundle per namespace, work out the HA problems the
generated bundle has (from the objects themselves), read each tool's machine-readable output into
(problem class, object) pairs, and write the markdown section.

  report.py split BUNDLE DIR             one file per namespace: DIR/<namespace>.yaml
  report.py findings TOOL OUTPUT         print what TOOL reported: one JSON line per finding
  report.py markdown WORKDIR             the section (timings + problem table) on stdout

Needs PyYAML (with libyaml for speed).
"""

import collections
import json
import math
import os
import re
import statistics
import sys

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# --------------------------------------------------------------------------------------------
# Splitting


def split(bundle, out_dir):
    """Writes each document of BUNDLE to OUT_DIR/<its namespace>.yaml, in order, unchanged."""
    os.makedirs(out_dir, exist_ok=True)
    namespace = re.compile(r"^  namespace: (\S+)$", re.M)
    files = {}
    with open(bundle) as f:
        text = f.read()
    for doc in re.split(r"^---\n", text, flags=re.M):
        if not doc.strip():
            continue
        m = namespace.search(doc)
        ns = m.group(1) if m else "default"
        files.setdefault(ns, []).append(doc)
    for ns, docs in files.items():
        with open(os.path.join(out_dir, f"{ns}.yaml"), "w") as f:
            for doc in docs:
                f.write("---\n")
                f.write(doc)
    return len(files)


# --------------------------------------------------------------------------------------------
# The HA problems of the bundle, worked out from its objects (not from any tool's output)

# Problem classes: id -> description. "planted" ones are real availability problems of the bundle;
# the rest are what the bundle deliberately does NOT have wrong, to show findings that are noise.
CLASSES = collections.OrderedDict(
    [
        ("no-pdb", "Deployment with more than one replica (spec or HPA floor) and no PDB covering it"),
        ("single-replica", "Deployment that runs one replica (no HPA raises it)"),
        ("recreate-scaled", "Deployment with strategy Recreate that its HPA scales above one replica"),
        ("replicas-vs-hpa", "Deployment sets spec.replicas while an HPA manages it (every apply resets the HPA's count)"),
        ("pdb-eviction-policy", "PDB without unhealthyPodEvictionPolicy: AlwaysAllow (unhealthy pods block drains)"),
    ]
)


def load_objects(directory):
    objects = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".yaml"):
            with open(os.path.join(directory, name)) as f:
                objects.extend(d for d in yaml.load_all(f, Loader=Loader) if d)
    return objects


def key(kind, namespace, name):
    return (kind, namespace or "default", name)


def truth(objects):
    """Problem class -> set of (kind, namespace, name), from the objects."""
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    hpas = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    hpa_of = {}
    for h in hpas:
        ref = h["spec"]["scaleTargetRef"]
        if ref["kind"] == "Deployment":
            hpa_of[(h["metadata"]["namespace"], ref["name"])] = h

    def covers(pdb, d):
        if pdb["metadata"]["namespace"] != d["metadata"]["namespace"]:
            return False
        sel = pdb["spec"].get("selector", {}).get("matchLabels", {})
        labels = d["spec"]["template"]["metadata"].get("labels", {})
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())

    pdbs_by_ns = collections.defaultdict(list)
    for p in pdbs:
        pdbs_by_ns[p["metadata"]["namespace"]].append(p)
    out = {c: set() for c in CLASSES}
    for d in deployments:
        meta = d["metadata"]
        k = key("Deployment", meta["namespace"], meta["name"])
        hpa = hpa_of.get((meta["namespace"], meta["name"]))
        replicas = d["spec"].get("replicas", 1)
        floor = hpa["spec"].get("minReplicas", 1) if hpa else replicas
        ceiling = max(replicas, hpa["spec"]["maxReplicas"]) if hpa else replicas
        if floor > 1 and not any(covers(p, d) for p in pdbs_by_ns[meta["namespace"]]):
            out["no-pdb"].add(k)
        if floor <= 1:
            out["single-replica"].add(k)
        if d["spec"].get("strategy", {}).get("type") == "Recreate" and ceiling > 1:
            out["recreate-scaled"].add(k)
        if hpa and "replicas" in d["spec"]:
            out["replicas-vs-hpa"].add(k)
    for p in pdbs:
        if p["spec"].get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
            out["pdb-eviction-policy"].add(key("PodDisruptionBudget", p["metadata"]["namespace"], p["metadata"]["name"]))
    return out


# --------------------------------------------------------------------------------------------
# Each tool's output -> findings (check id, kind, namespace, name)

# Which of a tool's checks speaks to which problem class. A check not listed here is counted
# under "other findings" of that tool.
CLASS_OF = {
    "ha-guard": {
        "pdb-missing": "no-pdb",
        "recreate-multi-replica": "recreate-scaled",
        "rwo-volume-multi-replica": "recreate-scaled",
        "hpa-replicas-conflict": "replicas-vs-hpa",
        "inject-unhealthy-pod-eviction-policy": "pdb-eviction-policy",
        "pdb-unhealthy-eviction-policy": "pdb-eviction-policy",
    },
    "kube-linter": {
        "minimum-three-replicas": "single-replica",
        "no-rolling-update-strategy": "recreate-scaled",
        "pdb-unhealthy-pod-eviction-policy": "pdb-eviction-policy",
    },
    "polaris": {
        "missingPodDisruptionBudget": "no-pdb",
        "deploymentMissingReplicas": "single-replica",
    },
    "kube-score": {
        "deployment-has-poddisruptionbudget": "no-pdb",
        "deployment-replicas": "single-replica",
        "deployment-strategy": "recreate-scaled",
        "deployment-targeted-by-hpa-does-not-have-replicas-configured": "replicas-vs-hpa",
    },
    "kyverno": {
        "require-pdb": "no-pdb",
        "deployment-has-multiple-replicas": "single-replica",
    },
}


def findings_ha_guard(text):
    doc = json.loads(text)
    for f in doc.get("findings", []):
        yield f["rule"], f["kind"], f.get("namespace"), f["name"]
    # `check` also reports the mutations the webhook would make (what `--fix` writes).
    for m in doc.get("mutations") or []:
        yield m["mutation"], m["kind"], m.get("namespace"), m["name"]


def findings_kube_linter(text):
    doc = json.loads(text)
    for r in doc.get("Reports") or []:
        o = r["Object"]["K8sObject"]
        yield r["Check"], o["GroupVersionKind"]["Kind"], o.get("Namespace"), o["Name"]


def findings_polaris(text):
    doc = json.loads(text)

    def failed(results):
        for check, r in (results or {}).items():
            if not r.get("Success", True):
                yield check

    for res in doc.get("Results") or []:
        k = (res["Kind"], res.get("Namespace"), res["Name"])
        checks = set(failed(res.get("Results")))
        pod = res.get("PodResult") or {}
        checks.update(failed(pod.get("Results")))
        for c in pod.get("ContainerResults") or []:
            checks.update(failed(c.get("Results")))
        for check in sorted(checks):
            yield (check, *k)


def findings_kube_score(text):
    # kube-score's json: a list of scored objects, each with its checks and a grade (1 critical,
    # 5 warning, 7 almost ok, 10 ok); a finding is a check that was not skipped and graded < 10.
    for obj in json.loads(text) or []:
        kind = obj["type_meta"]["kind"]
        meta = obj.get("object_meta") or {}
        for c in obj.get("checks") or []:
            if not c.get("skipped") and c.get("grade", 10) < 10:
                yield c["check"]["id"], kind, meta.get("namespace"), meta.get("name")


def findings_kyverno(text):
    # `kyverno apply -p --output-format json` prints a deprecation warning per ClusterPolicy on
    # stdout before the report (one JSON ClusterReport on the last line).
    start = text.find("\n{") + 1 if not text.startswith("{") else 0
    doc = json.loads(text[start:])
    reports = doc.get("items", [doc]) if doc.get("kind", "").endswith("List") else [doc]
    for rep in reports:
        for r in rep.get("results") or []:
            if r.get("result") in ("fail", "warn"):
                for res in r.get("resources") or []:
                    yield r["policy"], res["kind"], res.get("namespace"), res["name"]
            elif r.get("result") == "error":
                for res in r.get("resources") or []:
                    yield "error:" + r["policy"], res["kind"], res.get("namespace"), res["name"]


READERS = {
    "ha-guard": findings_ha_guard,
    "kube-linter": findings_kube_linter,
    "polaris": findings_polaris,
    "kube-score": findings_kube_score,
    "kyverno": findings_kyverno,
}


def read_findings(tool, path):
    with open(path) as f:
        text = f.read()
    return {(c, key(k, ns, n)) for c, k, ns, n in READERS[tool](text)}


# --------------------------------------------------------------------------------------------
# Markdown


def fmt_range(values, scale=1.0, digits=2):
    v = [x * scale for x in values]
    return f"{statistics.median(v):.{digits}f} ({min(v):.{digits}f}–{max(v):.{digits}f})"


def markdown(workdir):
    meta = json.load(open(os.path.join(workdir, "meta.json")))
    tools = meta["tools"]
    sizes = meta["sizes"]
    times = collections.defaultdict(list)  # (tool, size) -> [(wall, cpu, rss_kb, rc)]
    for line in open(os.path.join(workdir, "times.tsv")):
        tool, size, rnd, wall, user, sys_, rss, rc = line.split()
        times[(tool, int(size))].append((float(wall), float(user) + float(sys_), int(rss), int(rc)))
    out = []
    out.append(f"Input: the generated bundle split per namespace into {meta['files']} files "
               f"(one directory; every tool gets the same directory or the same file list). "
               f"Interleaved rounds (tool order rotated each round; `runs` per row); median (min–max). "
               f"Wall and user+sys CPU from `/usr/bin/time`, peak RSS is its max resident set size.")
    out.append("")
    out.append("| tool | objects | runs | wall s | CPU s | peak RSS MB | exit |")
    out.append("|---|---:|---:|---:|---:|---:|---|")
    for size in sizes:
        for tool in tools:
            rows = times.get((tool["name"], size))
            if not rows:
                continue
            wall = [r[0] for r in rows]
            cpu = [r[1] for r in rows]
            rss = [r[2] for r in rows]
            rcs = sorted({r[3] for r in rows})
            out.append(f"| {tool['label']} | {size:,} | {len(rows)} | {fmt_range(wall)} | {fmt_range(cpu)} "
                       f"| {fmt_range(rss, 1 / 1024, 0)} | {','.join(map(str, rcs))} |")
    out.append("")

    # Problems: the largest size's truth and outputs (the generator is the same at every size).
    size = max(sizes)
    objects = load_objects(os.path.join(workdir, f"input-{size}"))
    planted = truth(objects)
    found = {t["name"]: read_findings(t["name"], os.path.join(workdir, f"out-{t['name']}-{size}.json"))
             for t in tools if os.path.exists(os.path.join(workdir, f"out-{t['name']}-{size}.json"))}
    out.append(f"HA problems of the {size:,}-object bundle (worked out from its objects by "
               f"benches/peers/report.py) and how many of those objects each tool flags, counted "
               f"from its JSON output (the check IDs mapped to each class are in report.py `CLASS_OF`):")
    out.append("")
    header = "| problem | objects | " + " | ".join(t["label"] for t in tools if t["name"] in found) + " |"
    out.append(header)
    out.append("|---|---:|" + "---|" * len(found))
    for cls, desc in CLASSES.items():
        cells = []
        for t in tools:
            if t["name"] not in found:
                continue
            mapping = CLASS_OF[t["name"]]
            hit = {obj for check, obj in found[t["name"]] if mapping.get(check) == cls}
            got = len(hit & planted[cls])
            extra = len(hit - planted[cls])
            if not planted[cls]:
                cells.append(f"{len(hit)} flagged")
                continue
            cell = "yes" if got == len(planted[cls]) else ("partly" if got else "no")
            cell += f" {got}/{len(planted[cls])}"
            silent = sorted(c for c, v in mapping.items() if v == cls and not any(f == c for f, _ in found[t["name"]]))
            if not got and silent:
                cell += " (`" + "`, `".join(silent) + "` flagged none)"
            if extra:
                cell += f" (+{extra} not in class)"
            checks = sorted({c for c, obj in found[t["name"]] if mapping.get(c) == cls})
            if checks:
                cell += " `" + "`, `".join(checks) + "`"
            cells.append(cell)
        out.append(f"| {desc} | {len(planted[cls])} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Other findings (checks that match no class above; objects flagged per check):")
    out.append("")
    for t in tools:
        if t["name"] not in found:
            continue
        mapping = CLASS_OF[t["name"]]
        other = collections.Counter(c for c, _ in found[t["name"]] if c not in mapping)
        text = ", ".join(f"`{c}` {n}" for c, n in sorted(other.items())) or "none"
        out.append(f"- {t['label']}: {text}")
    out.append("")
    return "\n".join(out)


def main(argv):
    if argv[1] == "split":
        print(split(argv[2], argv[3]))
    elif argv[1] == "findings":
        for check, obj in sorted(read_findings(argv[2], argv[3])):
            print(json.dumps([check, *obj]))
    elif argv[1] == "truth":
        for cls, objs in truth(load_objects(argv[2])).items():
            print(cls, len(objs))
    elif argv[1] == "markdown":
        print(markdown(argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
