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
/// added by a version no newer than this one.
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
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "libwool.so's exports differ from abi/wool.symbols:\n  exported but not listed (add \
         them with version {}): {unlisted:?}\n  listed but not exported (symbols are never \
         removed): {missing:?}",
        env!("CARGO_PKG_VERSION")
    );
    let current = version_tuple(env!("CARGO_PKG_VERSION"));
    for (name, added) in &listed {
        assert!(
            version_tuple(added) <= current,
            "{name} is listed as added in {added}, after this version"
        );
    }
}
