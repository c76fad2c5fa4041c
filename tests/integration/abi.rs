//! The C ABI's exported symbols against the committed list, `abi/wool.symbols`: a symbol may
//! appear or disappear only together with a change of that list (which says which version
//! added each symbol).

use crate::common;

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Global symbols `libwool.so` defines, from `nm -D --defined-only`.
fn exported() -> BTreeSet<String> {
    let library = common::library_dir().join("libwool.so");
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&library)
        .output()
        .expect("nm (binutils) runs");
    assert!(output.status.success(), "nm {}", library.display());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, kind, name] if kind.chars().all(|c| c.is_ascii_uppercase()) => {
                    Some(name.to_string())
                }
                _ => None,
            }
        })
        .collect()
}

/// `abi/wool.symbols`: symbol → the version that added it.
fn listed() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("abi/wool.symbols");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, version) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("not `symbol version`: {line:?}"));
            (name.to_string(), version.trim().to_string())
        })
        .collect()
}

fn version_tuple(version: &str) -> (u64, u64, u64) {
    let parts: Vec<u64> = version
        .split('.')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("bad version {version:?}"))
        })
        .collect();
    assert_eq!(parts.len(), 3, "bad version {version:?}");
    (parts[0], parts[1], parts[2])
}

/// Given the library built for this run, then it exports exactly the listed symbols, each
/// added by a version no newer than the next release.
#[test]
fn the_exported_symbols_are_exactly_the_committed_list() {
    let exported = exported();
    let listed = listed();
    let unlisted: Vec<_> = exported
        .iter()
        .filter(|name| !listed.contains_key(*name))
        .collect();
    let missing: Vec<_> = listed
        .keys()
        .filter(|name| !exported.contains(*name))
        .collect();
    // A symbol added since the last release is listed with the release that will ship it,
    // the next minor version (the ABI only grows, so a release that adds one is a minor one);
    // the crate's version moves to it when that release is cut.
    let (major, minor, _) = version_tuple(env!("CARGO_PKG_VERSION"));
    let next = (major, minor + 1, 0);
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "libwool.so's exports differ from abi/wool.symbols:\n  exported but not listed (add \
         them with the next release's version, {}.{}.0): {unlisted:?}\n  listed but not \
         exported (symbols are never removed): {missing:?}",
        next.0,
        next.1
    );
    for (name, added) in &listed {
        assert!(
            version_tuple(added) <= next,
            "{name} is listed as added in {added}, after the next release ({}.{}.0)",
            next.0,
            next.1
        );
    }
}
