"""The checker's report as JUnit XML (``--junit FILE``), the format CI systems read test results in.

The shape is the one pytest writes (``--junitxml``) and GitHub Actions' test reporters, Jenkins
and GitLab read: a ``<testsuites>`` root holding one ``<testsuite>`` for the run, with the counts
``tests``, ``failures``, ``errors`` (always 0: a run that cannot run writes no report), ``skipped``
and ``time`` (seconds); one ``<testcase>`` per check, ``classname`` ``acp_trio.check.AREA`` (the
check name up to its first dot: ``initialize``, ``jsonrpc``, ``session``, ...), ``name`` the check
name, ``time`` its seconds.  A ``FAIL`` holds ``<failure message="what was observed" type="FAIL">``;
a ``SKIP`` holds ``<skipped message="why">``; a ``WARN`` passes (it does not fail the run: exit
status 0), with its observation in ``<system-out>`` beginning ``WARN:`` and the testcase property
``status`` ``WARN``.  Every testcase has the properties ``status``, ``source`` (the rule's spec
page) and, where the check covers rules of the official test kit, ``requirements`` (acp-tck ids,
space-separated: :mod:`acp_trio.check._tck`).  Characters XML 1.0 cannot carry (control
characters an agent wrote) become U+FFFD.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Report

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: str) -> str:
    """``value`` with every character XML 1.0 cannot hold replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", value)


def junit_tree(report: Report, name: str = "acp-trio check") -> ET.ElementTree[ET.Element]:
    """``report`` as a JUnit XML tree (see the module docstring); ``name``: the suite's name."""
    from ._base import Status

    counts = {status: sum(f.status is status for f in report.findings) for status in Status}
    seconds = sum(f.seconds for f in report.findings)
    totals = {
        "tests": str(len(report.findings)),
        "failures": str(counts[Status.FAIL]),
        "errors": "0",
        "skipped": str(counts[Status.SKIP]),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", {"name": name, **totals})
    suite = ET.SubElement(root, "testsuite", {"name": _text(f"{name}: {' '.join(report.command)}"), **totals})
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", {"name": "command", "value": _text(" ".join(report.command))})
    ET.SubElement(properties, "property", {"name": "protocol", "value": str(report.protocol)})
    for finding in report.findings:
        area = finding.name.split(".", 1)[0]
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"acp_trio.check.{area}", "name": finding.name, "time": f"{finding.seconds:.3f}"},
        )
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", {"name": "status", "value": finding.status.value})
        ET.SubElement(props, "property", {"name": "source", "value": _text(finding.source)})
        if finding.requirements:
            ET.SubElement(props, "property", {"name": "requirements", "value": " ".join(finding.requirements)})
        observed = _text(finding.observed)
        about = _text(f"{finding.title}; {finding.source}")
        if finding.status is Status.FAIL:
            failure = ET.SubElement(case, "failure", {"message": observed, "type": "FAIL"})
            failure.text = "\n".join([observed, *(f"- {_text(detail)}" for detail in finding.details), f"({about})"])
        elif finding.status is Status.SKIP:
            ET.SubElement(case, "skipped", {"message": observed})
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{finding.status.value}: {observed}\n({about})"
    ET.indent(root)
    return ET.ElementTree(root)
