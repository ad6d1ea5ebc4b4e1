//! hwloc XML (version 2) import.
//!
//! Only the objects pjw models are read: Package, NUMANode, L3Cache, L2Cache, Core and PU, plus the
//! root object's `cpuset`, `complete_cpuset` and `allowed_cpuset`. Everything else (Group, Die,
//! L1 caches, memory-side caches, I/O objects, info, page types, cpu kinds) is skipped. Of the
//! distances, the NUMA latency matrix is read.
//!
//! Membership is taken from cpusets: a PU belongs to the smallest object of a level whose
//! `cpuset` holds it, or for an offline PU whose `complete_cpuset` holds it. That is the same as
//! taking the enclosing objects for a well-formed file, and it also places the offline PUs hwloc
//! leaves out of the tree. In v2 a NUMANode is a memory child of the object it is local to, so its
//! `cpuset` is its locality; when several nodes share one locality (KNL's DDR and MCDRAM), the one
//! without a subtype (then the lowest `os_index`) is the PUs' node and the others are memory-only.
//! An `L3Cache` with subtype `MemorySideCache` (KNL's MCDRAM cache) is a cache in front of memory,
//! not one shared by cores, and is not an L3 domain.

use pjw_core::{CoreError, CpuSet, NumaDistances, NumaNode, Pu, Topology, MAX_CPUS};
use roxmltree::{Document, Node, ParsingOptions};

use crate::{number_by_first_cpu, validated, TopologyError};

/// Parse an hwloc bitmap as written in XML: comma-separated 32-bit hex words, most significant
/// first ("0x00ffffff", "0x00000303,0x03030000,,0x03030303"). hwloc leaves zero words empty;
/// an infinite set's leading "0xf...f" word is dropped (callers intersect with real CPUs).
pub fn parse_hwloc_mask(text: &str) -> Result<CpuSet, CoreError> {
    let words: Vec<&str> = text
        .trim()
        .split(',')
        .map(|w| w.trim())
        .filter(|w| !w.eq_ignore_ascii_case("0xf...f"))
        .map(|w| if w.is_empty() { "0x0" } else { w })
        .collect();
    if words.is_empty() {
        return Ok(CpuSet::new());
    }
    CpuSet::parse_mask(&words.join(","))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Package,
    Numa,
    L3,
    L2,
    Core,
    Pu,
}

#[derive(Debug)]
struct Obj {
    kind: Kind,
    os_index: Option<u32>,
    cpuset: CpuSet,
    complete: CpuSet,
    subtype: Option<String>,
    memory: Option<u64>,
}

/// Domains of one level, numbered by their lowest CPU.
struct LevelIndex {
    /// (cpuset, complete_cpuset, id)
    doms: Vec<(CpuSet, CpuSet, u32)>,
}

impl LevelIndex {
    fn new(objs: &[&Obj]) -> LevelIndex {
        let items: Vec<(u32, CpuSet)> = objs
            .iter()
            .map(|o| (o.complete.first().unwrap_or(u32::MAX), o.complete))
            .collect();
        let ids = number_by_first_cpu(&items);
        LevelIndex {
            doms: objs
                .iter()
                .zip(ids)
                .map(|(o, id)| (o.cpuset, o.complete, id))
                .collect(),
        }
    }

    /// The id of the smallest domain holding `cpu` (in its cpuset if online, else its complete
    /// cpuset).
    fn find(&self, cpu: u32, online: bool) -> Option<u32> {
        self.doms
            .iter()
            .map(|(c, full, id)| (if online { c } else { full }, id))
            .filter(|(s, _)| s.contains(cpu))
            .min_by_key(|(s, _)| s.len())
            .map(|(_, id)| *id)
    }

    fn max_id(&self) -> Option<u32> {
        self.doms.iter().map(|d| d.2).max()
    }
}

/// Parse hwloc v2 XML text; `source` names it in errors and in the result.
pub(crate) fn parse(text: &str, source: &str) -> Result<Topology, TopologyError> {
    let opts = ParsingOptions {
        allow_dtd: true,
        ..ParsingOptions::default()
    };
    let doc =
        Document::parse_with_options(text, opts).map_err(|e| xml_err(source, e.to_string()))?;
    let r = Reader { doc: &doc, source };
    let root = r.root_object()?;
    let online = r
        .mask(root, "cpuset")?
        .ok_or_else(|| r.err("root object has no cpuset attribute".into()))?;
    let mut complete = r
        .mask(root, "complete_cpuset")?
        .unwrap_or(online)
        .union(&online);
    let allowed = r.mask(root, "allowed_cpuset")?.unwrap_or(online);
    let objs = r.objects(root)?;
    complete = complete.union(&r.pu_cpus(&objs)?);
    let mut levels = Levels::new(&objs);
    let numa = r.numa(root, &objs, online)?;
    let pus = complete
        .iter()
        .map(|cpu| levels.pu(cpu, online.contains(cpu), &numa))
        .collect();
    validated(Topology {
        source: source.to_string(),
        pus,
        numa_nodes: numa.nodes,
        allowed: allowed.intersection(&online),
        distances: numa_distances(&doc).unwrap_or_default(),
    })
}

fn xml_err(source: &str, reason: String) -> TopologyError {
    TopologyError::Xml {
        file: source.to_string(),
        reason,
    }
}

/// A parsed document and the name its errors give it.
struct Reader<'a, 'input> {
    doc: &'a Document<'input>,
    source: &'a str,
}

impl<'a, 'input> Reader<'a, 'input> {
    fn err(&self, reason: String) -> TopologyError {
        xml_err(self.source, reason)
    }

    /// The line of the document `n` starts on.
    fn line(&self, n: Node) -> u32 {
        self.doc.text_pos_at(n.range().start).row
    }

    /// The `<topology>` element's first `<object>` (the machine).
    fn root_object(&self) -> Result<Node<'a, 'input>, TopologyError> {
        let top = self.doc.root_element();
        if top.tag_name().name() != "topology" {
            return Err(self.err(format!(
                "root element is <{}>, expected <topology>",
                top.tag_name().name()
            )));
        }
        top.children()
            .find(|n| n.is_element() && n.has_tag_name("object"))
            .ok_or_else(|| self.err("no root object".into()))
    }

    /// A bitmap attribute of `n`, if it has one.
    fn mask(&self, n: Node, attr: &str) -> Result<Option<CpuSet>, TopologyError> {
        match n.attribute(attr) {
            None => Ok(None),
            Some(v) => parse_hwloc_mask(v)
                .map(Some)
                .map_err(|e| self.err(format!("line {}: {attr}=\"{v}\": {e}", self.line(n)))),
        }
    }

    /// A non-negative integer attribute of `n`, if it has one.
    fn number(&self, n: Node, attr: &str) -> Result<Option<u64>, TopologyError> {
        match n.attribute(attr) {
            None => Ok(None),
            Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
                self.err(format!(
                    "line {}: {attr}=\"{v}\" is not a non-negative integer",
                    self.line(n)
                ))
            }),
        }
    }

    /// The objects pjw models, below the root in document order.
    fn objects(&self, root: Node) -> Result<Vec<Obj>, TopologyError> {
        let mut objs = Vec::new();
        for n in root
            .descendants()
            .filter(|n| n.is_element() && n.has_tag_name("object"))
        {
            if n == root {
                continue;
            }
            if let Some(o) = self.object(n)? {
                objs.push(o);
            }
        }
        Ok(objs)
    }

    /// One object, or `None` for a type pjw does not model.
    fn object(&self, n: Node) -> Result<Option<Obj>, TopologyError> {
        // The line is counted only for an error (it scans the text up to the object).
        let line = || self.line(n);
        let ty = n
            .attribute("type")
            .ok_or_else(|| self.err(format!("line {}: object without a type attribute", line())))?;
        let subtype = n.attribute("subtype").map(str::to_string);
        let kind = match ty {
            "Package" => Kind::Package,
            "NUMANode" => Kind::Numa,
            "L3Cache" if subtype.as_deref() == Some("MemorySideCache") => return Ok(None),
            "L3Cache" => Kind::L3,
            "L2Cache" => Kind::L2,
            "Core" => Kind::Core,
            "PU" => Kind::Pu,
            _ => return Ok(None),
        };
        let os_index = match self.number(n, "os_index")? {
            None => None,
            Some(v) => match u32::try_from(v).ok().filter(|&os| (os as usize) < MAX_CPUS) {
                Some(os) => Some(os),
                None => {
                    return Err(self.err(format!(
                        "line {}: {ty} os_index {v} is out of range (pjw handles 0-{})",
                        line(),
                        MAX_CPUS - 1
                    )))
                }
            },
        };
        let cpuset = match (self.mask(n, "cpuset")?, kind, os_index) {
            (Some(s), _, _) => s,
            (None, Kind::Pu, Some(os)) => CpuSet::from_iter([os]),
            (None, _, _) => {
                return Err(self.err(format!(
                    "line {}: {ty} object without a cpuset attribute",
                    line()
                )))
            }
        };
        if matches!(kind, Kind::Pu | Kind::Numa) && os_index.is_none() {
            return Err(self.err(format!(
                "line {}: {ty} object without an os_index attribute",
                line()
            )));
        }
        let full = self
            .mask(n, "complete_cpuset")?
            .unwrap_or(cpuset)
            .union(&cpuset);
        Ok(Some(Obj {
            kind,
            os_index,
            cpuset,
            complete: full,
            subtype,
            memory: self.number(n, "local_memory")?,
        }))
    }

    /// The CPUs of the PU objects (each once: a PU listed twice is an error).
    fn pu_cpus(&self, objs: &[Obj]) -> Result<CpuSet, TopologyError> {
        let mut seen = CpuSet::new();
        for o in objs.iter().filter(|o| o.kind == Kind::Pu) {
            let os = o.os_index.unwrap_or(0);
            if seen.contains(os) {
                return Err(self.err(format!("pu {os} appears twice")));
            }
            seen.insert(os);
        }
        Ok(seen)
    }

    /// The NUMA nodes: the primary node of a locality is the one without a subtype, then the
    /// lowest os_index; the others, and nodes local to no CPU, are memory-only. A machine
    /// without any is one node holding every online CPU and the root's memory.
    fn numa<'o>(
        &self,
        root: Node,
        objs: &'o [Obj],
        online: CpuSet,
    ) -> Result<Numa<'o>, TopologyError> {
        let objs = of(objs, Kind::Numa);
        let mut nodes: Vec<NumaNode> = Vec::new();
        for o in &objs {
            let os = o.os_index.unwrap_or(0);
            if nodes.iter().any(|n| n.os == os) {
                return Err(self.err(format!("numa node {os} appears twice")));
            }
            let rank = |x: &Obj| (x.subtype.is_some(), x.os_index);
            let outranked = objs
                .iter()
                .any(|p| p.cpuset == o.cpuset && rank(p) < rank(o));
            nodes.push(NumaNode {
                os,
                cpus: o.cpuset,
                memory: o.memory,
                memory_only: o.cpuset.is_empty() || outranked,
            });
        }
        nodes.sort_by_key(|n| n.os);
        let none = nodes.is_empty();
        if none {
            nodes.push(NumaNode {
                os: 0,
                cpus: online,
                memory: self.number(root, "local_memory")?,
                memory_only: false,
            });
        }
        Ok(Numa { objs, nodes, none })
    }
}

/// The objects of one kind.
fn of(objs: &[Obj], k: Kind) -> Vec<&Obj> {
    objs.iter().filter(|o| o.kind == k).collect()
}

/// The NUMA nodes of a document, with the objects they come from.
struct Numa<'o> {
    objs: Vec<&'o Obj>,
    nodes: Vec<NumaNode>,
    /// The document has no NUMA node: `nodes` is the one made up for the machine.
    none: bool,
}

impl Numa<'_> {
    /// The node of `cpu`: of the nodes whose cpuset (complete cpuset when offline) holds it,
    /// a primary before a memory-only one, then the smallest, then the lowest number.
    fn of(&self, cpu: u32, is_online: bool) -> Option<u32> {
        if self.none {
            return Some(0);
        }
        let mut best: Option<(bool, usize, u32)> = None;
        for (o, n) in self.objs.iter().map(|o| {
            let os = o.os_index.unwrap_or(0);
            (o, self.nodes.iter().find(|n| n.os == os))
        }) {
            let Some(n) = n else { continue };
            let set = if is_online { o.cpuset } else { o.complete };
            if set.contains(cpu) {
                let key = (n.memory_only, set.len(), n.os);
                best = Some(match best {
                    Some(b) if b <= key => b,
                    _ => key,
                });
            }
        }
        best.map(|b| b.2)
    }
}

/// The domains of the levels a PU belongs to by cpuset (packages, L3s, L2s, cores).
struct Levels {
    packages: LevelIndex,
    l3s: LevelIndex,
    l2s: LevelIndex,
    cores: LevelIndex,
    /// The id the next PU without a core gets (a core of its own).
    next_core: u32,
}

impl Levels {
    fn new(objs: &[Obj]) -> Levels {
        let cores = LevelIndex::new(&of(objs, Kind::Core));
        Levels {
            packages: LevelIndex::new(&of(objs, Kind::Package)),
            l3s: LevelIndex::new(&of(objs, Kind::L3)),
            l2s: LevelIndex::new(&of(objs, Kind::L2)),
            next_core: cores.max_id().map_or(0, |m| m + 1),
            cores,
        }
    }

    /// PU `cpu` with its domains; called once per PU in CPU order.
    fn pu(&mut self, cpu: u32, is_online: bool, numa: &Numa) -> Pu {
        let core = match self.cores.find(cpu, is_online) {
            Some(c) => c,
            None => {
                self.next_core += 1;
                self.next_core - 1
            }
        };
        Pu {
            os: cpu,
            core,
            l2: self.l2s.find(cpu, is_online),
            l3: self.l3s.find(cpu, is_online),
            numa: numa.of(cpu, is_online),
            package: self.packages.find(cpu, is_online).unwrap_or(0),
            online: is_online,
        }
    }
}

/// The NUMA latency matrix hwloc 2 writes (`<distances2 type="NUMANode" indexing="os">`, the
/// one named `NUMALatency` or else the first), if the file has a well-formed one.
fn numa_distances(doc: &Document) -> Option<NumaDistances> {
    let all: Vec<Node> = doc
        .descendants()
        .filter(|n| {
            n.has_tag_name("distances2")
                && n.attribute("type") == Some("NUMANode")
                && n.attribute("indexing") == Some("os")
        })
        .collect();
    let d = all
        .iter()
        .find(|n| n.attribute("name") == Some("NUMALatency"))
        .or_else(|| all.first())?;
    let numbers = |tag: &str| -> Option<Vec<u64>> {
        d.children()
            .filter(|c| c.has_tag_name(tag))
            .flat_map(|c| c.text().unwrap_or("").split_ascii_whitespace())
            .map(|w| w.parse::<u64>().ok())
            .collect()
    };
    let nodes: Vec<u32> = numbers("indexes")?
        .into_iter()
        .map(|x| u32::try_from(x).ok())
        .collect::<Option<_>>()?;
    let values: Vec<u32> = numbers("u64values")?
        .into_iter()
        .map(|x| u32::try_from(x).ok())
        .collect::<Option<_>>()?;
    NumaDistances::new(nodes, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hwloc_masks_with_empty_and_infinite_words() {
        let cases = [
            ("0x00ffffff", "0-23"),
            (
                "0x00000303,0x03030000,,0x03030303",
                "0-1,8-9,16-17,24-25,80-81,88-89,96-97,104-105",
            ),
            ("0x0000ffff,,,,,,0x0000ffff", "0-15,192-207"),
            ("0xf...f,0x0000000f", "0-3"),
            ("0x0", ""),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse_hwloc_mask(input).unwrap().to_string(),
                want,
                "{input}"
            );
        }
        assert!(parse_hwloc_mask("0xzz").is_err());
    }

    fn wrap(body: &str) -> String {
        format!(
            r#"<?xml version="1.0"?><!DOCTYPE topology SYSTEM "hwloc2.dtd"><topology version="2.0">{body}</topology>"#
        )
    }

    #[test]
    fn bad_documents_are_errors_naming_the_file() {
        let cases = [
            ("<topology", "invalid hwloc xml"),
            (
                r#"<topology><object type="Machine" cpuset="0x1"></topology>"#,
                "1:",
            ),
            ("<machine/>", "expected <topology>"),
            (&wrap(""), "no root object"),
            (&wrap(r#"<object type="Machine"/>"#), "no cpuset"),
            (
                &wrap(r#"<object type="Machine" cpuset="0xq"/>"#),
                "cpuset=\"0xq\"",
            ),
            (
                &wrap(r#"<object type="Machine" cpuset="0x1"><object cpuset="0x1"/></object>"#),
                "without a type",
            ),
            (
                &wrap(
                    r#"<object type="Machine" cpuset="0x1"><object type="PU" cpuset="0x1"/></object>"#,
                ),
                "without an os_index",
            ),
            (
                &wrap(r#"<object type="Machine" cpuset="0x1"><object type="Core"/></object>"#),
                "without a cpuset",
            ),
            (
                &wrap(
                    r#"<object type="Machine" cpuset="0x1"><object type="PU" os_index="5000"/></object>"#,
                ),
                "out of range",
            ),
            (
                &wrap(
                    r#"<object type="Machine" cpuset="0x1"><object type="NUMANode" os_index="0" cpuset="0x1" local_memory="-3"/></object>"#,
                ),
                "local_memory",
            ),
            (
                &wrap(r#"<object type="Machine" cpuset="0x0"/>"#),
                "no processing units",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text, "bad.xml").unwrap_err().to_string();
            assert!(e.starts_with("bad.xml: "), "{e}");
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(!e.ends_with('.'), "{e}");
        }
    }

    #[test]
    fn machine_without_numa_or_packages_is_one_of_each() {
        let t = parse(
            &wrap(r#"<object type="Machine" cpuset="0x3"><object type="PU" os_index="0"/><object type="PU" os_index="1"/></object>"#),
            "flat.xml",
        )
        .unwrap();
        assert_eq!(t.pus.len(), 2);
        assert_eq!(t.numa_nodes.len(), 1);
        assert_eq!(t.pus[1].numa, Some(0));
        assert_eq!(t.pus[1].package, 0);
        assert_ne!(t.pus[0].core, t.pus[1].core);
        assert_eq!(t.allowed.to_string(), "0-1");
    }
}
