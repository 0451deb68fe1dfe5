"""Declaring a gang: which pods form one, and what the whole gang needs.

A pod belongs to a gang by the scheduler-plugins label ``scheduling.x-k8s.io/pod-group:
<name>`` (the same label their coscheduling plugin and Kueue's pod groups use); the gang is
the pods of the namespace with the same value. Its size comes from scheduler-plugins'
``PodGroup`` object of that name (``scheduling.x-k8s.io/v1alpha1``, ``spec.minMember``:
:func:`pod_group`) where that CRD is installed, and from the members' annotations, which
override it (docs/gangs.md; kdra does not read the native Workload API yet):

- ``resource.kdra.dev/gang-min-member`` — how many pods must be pending before the gang is
  placed (``minMember``; 1..1024); wins over the PodGroup's ``spec.minMember``. Without
  either the gang is not placed.
- ``resource.kdra.dev/gang-match-attribute`` — a fully qualified device attribute
  (``gpu.kdra.dev/nvlinkDomain``) every device of every pod of the gang must share one value of.
- ``resource.kdra.dev/gang-topology-key`` — a node label all pods' nodes must share one value
  of (pack into one rack, one zone).
- ``resource.kdra.dev/gang-spread`` — ``node``: no two pods of the gang on one node.

Invariants:
- Parsing is total and bounded: a bad value raises :class:`InvalidObject` naming the
  annotation, the value (shortened) and the fix; never another exception.
- Every member must declare the same :class:`GangSpec` (:func:`agreed`); members that
  disagree make the gang invalid — no member is placed on a guess.
- A pod without the label is no gang member: :func:`gang_of` costs it one dict lookup.
- A PodGroup is parsed as totally as an annotation (:func:`pod_group`): a bad one makes the
  gang invalid (unless the members' annotation overrides its size), naming the PodGroup's
  field and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.dra.scheduling import POD_GROUP_LABEL
from kdra.kube.core.untrusted import shorten

MIN_MEMBER_ANNOTATION = f"{GROUP}/gang-min-member"
MATCH_ATTRIBUTE_ANNOTATION = f"{GROUP}/gang-match-attribute"
TOPOLOGY_KEY_ANNOTATION = f"{GROUP}/gang-topology-key"
SPREAD_ANNOTATION = f"{GROUP}/gang-spread"
__all__ = ["GANG_ANNOTATIONS", "MATCH_ATTRIBUTE_ANNOTATION", "MAX_MEMBERS",
           "MIN_MEMBER_ANNOTATION", "POD_GROUP_LABEL", "SPREAD_ANNOTATION",
           "TOPOLOGY_KEY_ANNOTATION", "GangSpec", "PodGroupSize", "agreed", "gang_of",
           "gang_spec", "pod_group"]

GANG_ANNOTATIONS = (MIN_MEMBER_ANNOTATION, MATCH_ATTRIBUTE_ANNOTATION, TOPOLOGY_KEY_ANNOTATION,
                    SPREAD_ANNOTATION)
MAX_MEMBERS = 1024
"""The largest ``minMember`` kdra places jointly (the search's depth)."""

_QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}"
                        r"[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]"
                        r"([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class GangSpec:
    """What a gang needs as a whole (see the module doc)."""

    name: str
    min_member: int
    match_attribute: str = ""
    topology_key: str = ""
    spread: bool = False

    def describe(self) -> str:
        parts = [f"{self.min_member} pods"]
        if self.match_attribute:
            parts.append(f"devices in one {self.match_attribute}")
        if self.topology_key:
            parts.append(f"nodes in one {self.topology_key}")
        if self.spread:
            parts.append("one pod per node")
        return ", ".join(parts)


def gang_of(pod: dict[str, object]) -> str | None:
    """The pod's gang name (its ``scheduling.x-k8s.io/pod-group`` label), or None."""
    meta = pod.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    name = labels.get(POD_GROUP_LABEL) if isinstance(labels, dict) else None
    return name if isinstance(name, str) and name else None


PodGroupSize = int | InvalidObject
"""A PodGroup's ``spec.minMember``, or why it cannot be used (:func:`pod_group`)."""

_INT32 = 2**31 - 1


def pod_group(obj: object) -> PodGroupSize:
    """The gang size a scheduler-plugins ``PodGroup`` declares (``spec.minMember``), or an
    :class:`InvalidObject` naming the field and the fix. ``spec.scheduleTimeoutSeconds`` is
    checked (a whole number of seconds) but changes nothing: kdra holds no device while a
    gang waits, so a timeout has nothing to release (docs/gangs.md). Total."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    where = f"PodGroup {shorten(name if isinstance(name, str) else '', 63)!r}"
    spec = obj.get("spec") if isinstance(obj, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    count = spec.get("minMember")
    if count is None:
        return InvalidObject("spec.minMember", "missing; set it to the number of pods that "
                             "must start together (or the pods' annotation "
                             f"{MIN_MEMBER_ANNOTATION})", where)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_MEMBERS:
        return InvalidObject("spec.minMember", f"{_brief(count)!r} is not a whole "
                             f"number from 1 to {MAX_MEMBERS}", where)
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)
                                or not 0 <= timeout <= _INT32):
        return InvalidObject("spec.scheduleTimeoutSeconds", f"{_brief(timeout)!r} "
                             "is not a whole number of seconds", where)
    return count


def _brief(value: object) -> str:
    """A value for a message, bounded (an integer of any size included: str() of a huge
    one would raise)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return "(a number out of range)"
    return shorten(str(value) if isinstance(value, (int, float, str)) else type(value).__name__,
                   20)


def gang_spec(pod: dict[str, object], group: PodGroupSize | None = None) -> GangSpec | None:
    """The gang the pod declares, or None (no label). ``group``: the size its gang's
    ``PodGroup`` declares (None: no PodGroup), used when the pod has no
    ``gang-min-member`` annotation (the annotation overrides it). Raises
    :class:`InvalidObject` for a bad annotation, or a bad PodGroup the pod relies on."""
    name = gang_of(pod)
    if name is None:
        return None
    meta = pod.get("metadata")
    raw = meta.get("annotations") if isinstance(meta, dict) else None
    annotations: dict[str, object] = raw if isinstance(raw, dict) else {}

    def text(key: str) -> str:
        value = annotations.get(key)
        return value.strip() if isinstance(value, str) else ""

    gang = f"gang {shorten(name, 63)!r}"

    def bad(annotation: str, message: str) -> InvalidObject:
        return InvalidObject(f"metadata.annotations[{annotation}]", f"{gang}: {message}")

    count = text(MIN_MEMBER_ANNOTATION)
    if not count and isinstance(group, InvalidObject):
        raise group
    if not count and group is not None:
        count = str(group)
    if not count:
        raise bad(MIN_MEMBER_ANNOTATION, "missing; set it to the number of pods that must "
                  "start together, or create a PodGroup (scheduling.x-k8s.io/v1alpha1) "
                  "of the gang's name with spec.minMember")
    if not count.isdigit() or len(count) > 4 or not 1 <= int(count) <= MAX_MEMBERS:
        raise bad(MIN_MEMBER_ANNOTATION, f"{shorten(count, 20)!r} is not a whole number from "
                  f"1 to {MAX_MEMBERS}")
    attribute = text(MATCH_ATTRIBUTE_ANNOTATION)
    if attribute and not _QUALIFIED.match(attribute):
        raise bad(MATCH_ATTRIBUTE_ANNOTATION, f"{shorten(attribute, 80)!r} is not a fully "
                  "qualified attribute name (domain/name, e.g. gpu.kdra.dev/nvlinkDomain)")
    key = text(TOPOLOGY_KEY_ANNOTATION)
    if key and not _LABEL_KEY.match(key):
        raise bad(TOPOLOGY_KEY_ANNOTATION, f"{shorten(key, 80)!r} is not a label key")
    spread = text(SPREAD_ANNOTATION)
    if spread not in ("", "node"):
        raise bad(SPREAD_ANNOTATION, f"{shorten(spread, 40)!r} is not supported; use "
                  "\"node\" or leave it out")
    return GangSpec(name, int(count), attribute, key, spread == "node")


def agreed(specs: Iterable[GangSpec]) -> GangSpec:
    """The spec every member declares; :class:`InvalidObject` if they differ (or none)."""
    found = set(specs)
    if len(found) != 1:
        names = sorted({s.name for s in found})
        raise InvalidObject(f"metadata.labels[{POD_GROUP_LABEL}]", f"gang "
                            f"{shorten(names[0] if names else '', 63)!r}: its pods declare "
                            "different gang annotations; give every pod of the gang the same "
                            "ones")
    return found.pop()
