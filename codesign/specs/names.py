"""One resolver for the names people write for GPUs, systems and models.

A name that is a catalog entry's name or alias (case, spaces and underscores free) resolves to
it directly. Otherwise it is read structurally:

* **GPUs and systems** ("NVIDIA H100-SXM5-80GB (DGX-H100)", "A100 40GB PCIe", "GB200 NVL72
  rack", "AMD Instinct MI300X OAM", "Intel Gaudi 3", "p4d.24xlarge"): vendor words, power
  ("700W") and memory type ("HBM3") are dropped; the part is the catalog GPU whose *family*
  (its name without form factor and memory, e.g. ``h100`` for ``h100-sxm``) is a token of the
  text, or two adjacent tokens joined ("Gaudi 3" -> ``gaudi3``); a stated form factor (PCIe,
  NVL) picks the family's part of that form ("H100 PCIe" -> ``h100-pcie``), an unstated one its
  SXM/OAM module; a stated memory size picks among parts of one family (A100 40GB vs 80GB) and
  must match the part; a form factor or memory size the catalog does not hold ("A100 PCIe",
  "H100 94GB") is an error, never a silent stand-in. A system word (DGX, HGX, NVL72,
  SuperPOD, rack, node) or a cloud instance name (:data:`INSTANCES`) also names the system:
  the GPU's usual topology, or the instance's own; a named system of :data:`SYSTEMS` ("DGX-1",
  "DGX-2", "Alps") names its own topology and, when the text names no part, its GPU.
* **Models** ("Meta-Llama-3.1-405B", "LLaMA 2 70B", "GPT-3 175B", "Mixtral 8x7B",
  "DeepSeek-V3 (671B)"): family words, major version and parameter count must all agree with
  a catalog model (its name's size, or ``published_params_B``, within 5%).

An unknown or ambiguous name is a :class:`SpecError` that lists the closest catalog names.
Every structural reading is returned as a note (an assumption the caller reports).
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codesign.errors import SpecError

#: words that carry no identity of a part
_NOISE = {"nvidia", "amd", "intel", "habana", "google", "cloud", "tesla", "instinct",
          "tensor", "core", "gpu", "gpus", "accelerator", "accelerators", "ai", "the", "with",
          "per", "x", "and", "of", "card", "module", "chip", "chips", "a", "hbm", "hbm2",
          "hbm2e", "hbm3", "hbm3e", "superchip", "platform", "baseboard", "board", "air",
          "liquid", "cooled", "edition", "datacenter", "data", "center"}
#: module form factors (SXM / OAM), the default: a part's name does not carry them
_OWN_FORMS = {"sxm", "sxm2", "sxm3", "sxm4", "sxm5", "sxm6", "oam", "mezzanine"}
#: card form factors: a catalog part of such a form carries it in its name (``h100-pcie``);
#: a family without a part of the stated form is an error
_OTHER_FORMS = {"pcie", "nvl", "nvl2", "pci"}
#: spellings of one form factor -> the form token a catalog part's name carries
_FORM_OF = {"pci": "pcie"}
#: words that name a system (the GPU's usual topology) rather than a bare part
_SYSTEM = re.compile(r"^(?:dgx|hgx|mgx|nvl\d+|superpod|pod|rack|node|nodes|cluster|server|"
                     r"system|ultracluster|eos|selene|hls\d*)$")

#: cloud instance names -> (catalog GPU, catalog topology or None = the GPU's usual system);
#: sources: AWS EC2 accelerated-computing instance pages (P4d/P4de: 8x A100 40/80 GB with
#: 400 Gb/s EFA; P5: 8x H100 with 3,200 Gb/s EFA; P5e/P5en: 8x H200; P6-B200: 8x B200),
#: Azure ND-series docs (ND A100 v4: 8x A100 40 GB; NDm A100 v4: 80 GB; ND H100 v5; ND H200
#: v5; ND MI300X v5), Google Cloud GPU machine types (a2-highgpu: A100 40 GB, a2-ultragpu:
#: A100 80 GB, a3-highgpu/megagpu/edgegpu: H100, a3-ultragpu: H200, a4-highgpu: B200,
#: a4x: GB200), Oracle Cloud bare-metal GPU shapes (BM.GPU.H100.8, BM.GPU.H200.8,
#: BM.GPU.B200.8, BM.GPU.MI300X.8: eight of that part; BM.GPU.A100-v2.8: A100 80 GB;
#: BM.GPU4.8: A100 40 GB); Google Cloud's series names for those machine types (A3 High, A3
#: Mega, A3 Edge: H100; A3 Ultra: H200; A4: B200; A4X: GB200; A4X Max, a4x-maxgpu-4g-metal:
#: GB300 - Compute Engine workload-policy docs, NVIDIA AI Cluster Runtime 'GKE A4X Max (GB300)'
#: page); AWS Neuron architecture docs (trn1.32xlarge / trn1n.32xlarge: 16 Trainium, 800 / 1,600
#: Gbps EFA; trn2.48xlarge: 16 Trainium2, 3.2 Tbps EFA; Trn2 UltraServer, u-trn2x64: four
#: trn2u.48xlarge, 64 Trainium2 on NeuronLink); Cloud TPU7x (Ironwood) accelerator types
#: (tpu7x-N: pytorch/xla PR #9586 parses 'tpu7x-...' accelerator types)
INSTANCES: tuple[tuple[str, str, str | None], ...] = (
    (r"\bbm\s*gpu\s*h100\b", "h100-sxm", None),
    (r"\bbm\s*gpu\s*h200\b", "h200", None),
    (r"\bbm\s*gpu\s*b200\b", "b200", None),
    (r"\bbm\s*gpu\s*mi300x\b", "mi300x", None),
    (r"\bbm\s*gpu\s*a100\s*v2\b", "a100-80gb", None),
    (r"\bbm\s*gpu4\b", "a100-40gb", None),
    (r"\bp4de\b", "a100-80gb", "aws-p4d"),
    (r"\bp4d\b", "a100-40gb", "aws-p4d"),
    (r"\bp5en?\b", "h200", None),
    (r"\bp5\b", "h100-sxm", None),
    (r"\bp6\s*b200\b", "b200", None),
    (r"\bndm\s*a100\s*v4\b|\bnd96amsr\s*(?:a100\s*)?v4\b", "a100-80gb", None),
    (r"\bnd\s*a100\s*v4\b|\bnd96asr\s*(?:a100\s*)?v4\b", "a100-40gb", None),
    (r"\bnd\w*\s*h100\s*v5\b", "h100-sxm", None),
    (r"\bnd\w*\s*h200\s*v5\b", "h200", None),
    (r"\bnd\w*\s*mi300x\s*v5\b", "mi300x", None),
    (r"\ba2\s*ultragpu\b", "a100-80gb", None),
    (r"\ba2\s*highgpu\b|\ba2\s*megagpu\b", "a100-40gb", None),
    (r"\ba3\s*ultragpu\b", "h200", None),
    (r"\ba3\s*(?:highgpu|megagpu|edgegpu)\b", "h100-sxm", None),
    (r"\ba4x\s*max(?:gpu)?\b", "gb300", None),
    (r"\ba4x\b", "gb200", None),
    (r"\ba4\s*highgpu\b", "b200", None),
    # the series names ("A3 Mega", "A3 Ultra", "A4"), after the machine types above
    (r"\ba3\s*ultra\b", "h200", None),
    (r"\ba3\s*(?:high|mega|edge)\b", "h100-sxm", None),
    (r"\ba4\b", "b200", None),
    # AWS Trainium instances: the UltraServer first (its instances are trn2u.48xlarge)
    (r"\btrn2\s*ultra\s*servers?\b|\bu\s*trn2x64\b|\btrn2u\b", "trainium2",
     "aws-trn2-ultraserver"),
    (r"\btrn2\b", "trainium2", "aws-trn2"),
    (r"\btrn1n\b", "trainium", "aws-trn1n"),
    (r"\btrn1\b", "trainium", "aws-trn1"),
    # Cloud TPU accelerator types / slice names (Google Cloud TPU docs: v4-4096, v5p-8192,
    # v5litepod-256, v6e-256; a slice of N cores or chips of that generation)
    (r"\bv5litepod\b|\bv5e\b", "tpu-v5e", None),
    (r"\bv5p\b", "tpu-v5p", None),
    (r"\btpu\s*7x\b|\btpu\s*v7x?\b|\bv7x\b|\bironwood\b", "tpu-v7", None),
    (r"\bv6e\b|\btrillium\b", "tpu-v6e", None),
    (r"\btpu\s*v4\b|\bv4\s+\d{2,}\b", "tpu-v4", None),
    (r"\btpu\s*v3\b|\bv3\s+\d+\b", "tpu-v3", None),
    # AWS EC2 P3 instance page: p3dn.24xlarge, 8x V100 32 GB with NVLink, 100 Gbps EFA
    (r"\bp3dn\b", "v100-32gb", "aws-p3dn"),
)

#: named systems -> (pattern on the lower-cased text, the GPU when the text names no part, the
#: system's catalog topology); a part named beside it must be of the default GPU's family.
#: Sources: NVIDIA DGX-1 (8x V100 SXM2, 16 GB at launch, 32 GB from 2018) and DGX-2/DGX-2H (16x
#: V100 32 GB) datasheets; CSCS Alps and JUPITER (Forschungszentrum Juelich) booster: 4x GH200
#: (96 GB HBM3) per node (topologies/quad-gh200.yaml)
SYSTEMS: tuple[tuple[str, str, str], ...] = (
    (r"\bdgx\s*1v?\b", "v100-16gb", "dgx-1"),
    (r"\bdgx\s*2h?\b", "v100-32gb", "dgx-2"),
    (r"\balps\b|\bjupiter\b|\bjedi\b", "gh200", "quad-gh200"),
)


#: architecture generations -> the generation's flagship data-center part, used only when the
#: text names no part, instance or system ("NVIDIA Hopper GPUs", "Blackwell Ultra"): an
#: ASSUMPTION reported as such; the more specific pattern first. Sources: NVIDIA architecture
#: pages (Volta: V100; Ampere: A100; Hopper: H100 SXM5, Grace Hopper: GH200; Blackwell: B200,
#: Grace Blackwell: GB200, Blackwell Ultra: B300 / GB300), AMD CDNA whitepapers (CDNA 2:
#: MI250X; CDNA 3: MI300X; CDNA 4: MI355X)
GENERATIONS: tuple[tuple[str, str], ...] = (
    (r"\bgrace\s*blackwell\s*ultra\b", "gb300"),
    (r"\bblackwell\s*ultra\b", "b300"),
    (r"\bgrace\s*blackwell\b", "gb200"),
    (r"\bblackwell\b", "b200"),
    (r"\bgrace\s*hopper\b", "gh200"),
    (r"\bhopper\b", "h100-sxm"),
    (r"\bampere\b", "a100-80gb"),
    (r"\bvolta\b", "v100-32gb"),
    (r"\bcdna\s*4\b", "mi355x"),
    (r"\bcdna\s*3\b", "mi300x"),
    (r"\bcdna\s*2\b", "mi250x"),
)


def system_named(text: str, gpu: str) -> str | None:
    """The catalog topology of the first cloud instance with a topology of its own
    (:data:`INSTANCES`: AWS p4d/p4de, p3dn) or named system (:data:`SYSTEMS`: DGX-1, DGX-2,
    Alps) that free text mentions ("ALiBi; 64 p4d.24xlarge; 400 Gbps EFA") and that holds
    catalog GPU ``gpu``: an instance holds exactly its part, a system any part of its
    family (a DGX-1 of 16 or 32 GB V100s); else ``None``."""
    low = re.sub(r"[-_./]+", " ", text.lower())
    for pattern, part, topo in INSTANCES:
        if topo is not None and part == gpu and re.search(pattern, low):
            return topo
    for pattern, part, topo in SYSTEMS:
        if part.split("-")[0] == gpu.split("-")[0] and re.search(pattern, low):
            return topo
    return None


@dataclass(frozen=True)
class Resolved:
    """A GPU (and the system, when the text names one) read from a name."""

    gpu: str
    topology: str | None = None
    notes: tuple[str, ...] = ()


def normalize(name: str) -> str:
    """Case, spaces and underscores free: ``"H100 SXM"`` -> ``"h100-sxm"``."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens; "80GB" stays one token, "NVL72" too."""
    t = text.lower().replace("µ", "u")
    t = re.sub(r"(\d)\s+(gb|gib|tb)\b", r"\1\2", t)  # "80 GB" -> "80gb"
    return [w for w in re.split(r"[^a-z0-9.]+", t) if w and w != "."]


def _memory_gb(tokens: list[str]) -> float | None:
    for w in tokens:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(gb|gib|g)", w)
        if m:
            return float(m.group(1))
    return None


def _family(entry: dict[str, Any]) -> str:
    """A catalog GPU's family key: its name without form factor and memory tokens
    (``h100-sxm``, ``h100-pcie`` and ``h100-nvl`` are all family ``h100``)."""
    words = [w for w in _tokens(str(entry.get("name", "")))
             if w not in _OWN_FORMS | _OTHER_FORMS and not re.fullmatch(r"\d+gb", w)]
    return "".join(words)


def _form(tokens: list[str]) -> str | None:
    """The non-module form factor (``pcie``, ``nvl``, ...) the tokens state, else ``None``
    (an SXM/OAM module, stated or not)."""
    forms = [_FORM_OF.get(w, w) for w in tokens if w in _OTHER_FORMS]
    return forms[0] if forms else None


def closest(ref: str, names: list[str]) -> str:
    """'; closest: a, b, c' for an error message (empty when nothing is close)."""
    near = difflib.get_close_matches(normalize(ref), [normalize(n) for n in names], n=3,
                                     cutoff=0.4)
    return f"; closest: {', '.join(near)}" if near else ""


def _gpu_families(entries: list[tuple[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    fams: dict[str, list[dict[str, Any]]] = {}
    for _, data in entries:
        fams.setdefault(_family(data), []).append(data)
    return fams


def resolve_gpu(text: str, entries: list[tuple[str, Any]],
                index: Callable[[str], Any | None]) -> Resolved:
    """The catalog GPU (and system) ``text`` names; see the module docstring.

    ``entries``: (file name, raw data) of the GPU catalog; ``index(name)``: the raw entry a
    name or alias maps to, or ``None``. Raises :class:`SpecError` listing close names."""
    names = [str(d.get("name")) for _, d in entries]
    hit = index(text)
    if hit is not None:
        return Resolved(str(hit["name"]))
    low = re.sub(r"[-_./]+", " ", text.lower())
    for pattern, gpu, topo in INSTANCES:
        if re.search(pattern, low):
            return Resolved(gpu, topo, (f"'{text}' read as the cloud instance of {gpu}"
                                        + (f" on {topo}" if topo else "")
                                        + " (codesign.specs.names.INSTANCES)",))
    families = _gpu_families(entries)
    found = _read_part(text, families, index)
    for pattern, default_gpu, topo in SYSTEMS:
        if re.search(pattern, low):
            return _in_named_system(text, found, default_gpu, topo, index)
    if found is None:
        for pattern, gpu in GENERATIONS:
            if re.search(pattern, low) and index(gpu) is not None:
                return Resolved(gpu, None, (
                    f"'{text}' names an architecture generation, not a part: read as its "
                    f"flagship {gpu} (ASSUMPTION; codesign.specs.names.GENERATIONS)",))
        raise SpecError(f"unknown gpu '{text}': no catalog part named in it"
                        f"{closest(text, names)}; allowed: {', '.join(names)} (or a file path)")
    part, notes, system = found
    gpu = str(part["name"])
    topo = str(part.get("default_topology")) if system else None
    if topo:
        notes.append(f"system '{system}' in the name: {gpu}'s usual system {topo}")
    return Resolved(gpu, topo, tuple(notes))


def _in_named_system(text: str, found: tuple[dict[str, Any], list[str], str | None] | None,
                     default_gpu: str, topo: str,
                     index: Callable[[str], Any | None]) -> Resolved:
    """The GPU and topology of a text naming a :data:`SYSTEMS` entry: the part the text names
    (of the system's family), else the system's default GPU."""
    default = index(default_gpu)
    if default is None:  # a SYSTEMS row naming a GPU the catalog lacks
        raise SpecError(f"gpu '{text}': system default {default_gpu} is not in the catalog")
    if found is None:
        return Resolved(default_gpu, topo, (f"'{text}' read as the system {topo} with its "
                                            f"{default_gpu} (codesign.specs.names.SYSTEMS)",))
    part, notes, _ = found
    if _family(part) != _family(default):
        raise SpecError(f"gpu '{text}': the {topo} system holds {_family(default)} parts, "
                        f"not {part['name']}")
    notes.append(f"system named in the text: {topo} (codesign.specs.names.SYSTEMS)")
    return Resolved(str(part["name"]), topo, tuple(notes))


def _read_part(text: str, families: dict[str, list[dict[str, Any]]],
               index: Callable[[str], Any | None]
               ) -> tuple[dict[str, Any], list[str], str | None] | None:
    """The catalog part the text names structurally (family, form factor, memory), the notes
    of that reading and the system word the text holds; ``None`` when it names no family.
    Raises :class:`SpecError` for a form factor or memory size the family does not hold."""
    # a count before the part ("4xH100", "8x H100") is not part of its name
    tokens = [re.sub(r"^\d+x(?=[a-z])", "", w) for w in _tokens(text)]
    candidates = set(tokens) | {a + b for a, b in itertools.pairwise(tokens)}
    found = [f for f in families if f in candidates]
    if not found:
        return None
    family = max(found, key=len)  # "gb200" over "b200" cannot both be tokens; longest wins
    form = _form(tokens)
    parts = [p for p in families[family] if _form(_tokens(str(p.get("name", "")))) == form]
    if not parts:
        held = [str(p["name"]) for p in families[family]]
        raise SpecError(f"gpu '{text}': the {(form or 'SXM/OAM').upper()} form factor of "
                        f"{family} is not in the catalog (its {family} entries: "
                        f"{', '.join(held)}, whose peaks and power differ){closest(text, held)}")
    notes: list[str] = []
    system = next((w for w in tokens if _SYSTEM.match(w)), None)
    mem = _memory_gb(tokens)
    if mem is not None:
        parts = _fitting_memory(text, family, parts, mem, system, notes)
    if len(parts) > 1:
        default = index(family)
        if default is None or default not in parts:
            raise SpecError(f"gpu '{text}' is ambiguous: "
                            f"{', '.join(str(p['name']) for p in parts)}; state the memory size")
        parts = [default]
        notes.append(f"memory size not stated: {default['name']}")
    notes.insert(0, f"'{text}' read as {parts[0]['name']}")
    return parts[0], notes, system


def _fitting_memory(text: str, family: str, parts: list[dict[str, Any]], mem: float,
                    system: str | None, notes: list[str]) -> list[dict[str, Any]]:
    """The parts whose HBM capacity is the stated ``mem`` GB (within 10%; with a system word,
    also the memory of an 8-GPU node); raises :class:`SpecError` when none is."""
    fits = [p for p in parts if abs(float(p.get("hbm_capacity_GB", 0)) - mem) <= 0.1 * mem]
    if not fits and system is not None:  # "DGX A100 320GB": the memory of 8 GPUs
        fits = [p for p in parts
                if abs(8 * float(p.get("hbm_capacity_GB", 0)) - mem) <= 0.1 * mem]
        if fits:
            notes.append(f"{mem:g} GB read as the memory of the 8-GPU {system}")
    if not fits:
        caps = ", ".join(f"{p['name']} {p.get('hbm_capacity_GB')} GB" for p in parts)
        raise SpecError(f"gpu '{text}': {mem:g} GB does not match the catalog's {family} "
                        f"({caps})")
    return fits


# --- models ---------------------------------------------------------------------------------

_ORG = re.compile(r"^(?:meta-llama/|mistralai/|deepseek-ai/|qwen/|tiiuae/|openai/|google/|"
                  r"eleutherai/|nvidia/)", re.IGNORECASE)


@dataclass(frozen=True)
class _ModelKey:
    family: str
    version: str | None
    size_b: float | None


def _size_b(word: str) -> float | None:
    m = re.fullmatch(r"(?:(\d+)x)?(\d+(?:\.\d+)?)([bmt])", word)
    if not m:
        return None
    value = float(m.group(2)) * {"b": 1.0, "m": 1e-3, "t": 1e3}[m.group(3)]
    return value * int(m.group(1)) if m.group(1) else value


def model_key(text: str) -> _ModelKey:
    """Family words, major version and size (billions) of a model name."""
    t = _ORG.sub("", text.strip()).lower()
    t = re.sub(r"^meta[-_ ]+", "", t)
    words = [w for w in re.split(r"[^a-z0-9.]+", t) if w]
    split: list[str] = []
    for w in words:  # "llama3" -> llama, 3; "v3" -> v, 3; keep "8x7b", "175b", "1.8t"
        if _size_b(w) is not None:
            split.append(w)
        else:
            split += re.findall(r"[a-z]+|\d+(?:\.\d+)?", w)
    family, version, size = "", None, None
    i = 0
    while i < len(split) and split[i].isalpha():
        family += split[i]
        i += 1
    if i < len(split) and re.fullmatch(r"\d+(?:\.\d+)?", split[i]):
        version = split[i].split(".")[0]
        i += 1
    for w in split[i:]:
        s = _size_b(w)
        if s is not None:
            size = s
            break
    return _ModelKey(family, version, size)


def resolve_model(text: str, entries: list[tuple[str, Any]]) -> tuple[str, tuple[str, ...]]:
    """The catalog model ``text`` names (family, major version and size all agree); raises
    :class:`SpecError` listing close names."""
    want = model_key(text)
    names = [str(d.get("name")) for _, d in entries]
    keys = [(d, model_key(str(d.get("name", "")))) for _, d in entries]

    def same_family(w: _ModelKey) -> list[tuple[dict[str, Any], _ModelKey]]:
        return [(d, k) for d, k in keys
                if w.family and (k.family, k.version) == (w.family, w.version)]

    same = same_family(want)
    if not same and want.family.endswith("v") and want.version is not None:
        # "LLaMA V2 7B", "LLaMA V3.1 70B" (Intel Gaudi tables): a version written with a
        # "V" of its own, where the family's name has none ("DeepSeek-V3" keeps its V)
        want = _ModelKey(want.family[:-1], want.version, want.size_b)
        same = same_family(want)
    if want.size_b is None:  # "DeepSeek-V3": the family and version alone, when unique
        hits = [d for d, _ in same] if len(same) == 1 else []
    else:
        hits = [d for d, k in same
                if (size := k.size_b or d.get("published_params_B")) is not None
                and abs(float(size) - want.size_b) <= 0.05 * want.size_b]
    if len(hits) == 1:
        return str(hits[0]["name"]), (f"model '{text}' read as {hits[0]['name']}",)
    raise SpecError(f"unknown model '{text}'{closest(text, names)}; allowed: "
                    f"{', '.join(names)} (or a file path)")


__all__ = ["INSTANCES", "SYSTEMS", "Resolved", "closest", "model_key", "normalize", "resolve_gpu",
           "resolve_model", "system_named"]
