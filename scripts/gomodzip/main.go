// Command gomodzip lays out one version of a Go module the way a module proxy serves it
// (https://go.dev/ref/mod#goproxy-protocol), from a directory holding the module's files:
//
//	<proxy>/<escaped module path>/@v/list          the versions, one a line (this one added)
//	<proxy>/<escaped module path>/@v/<version>.info {"Version":…,"Time":…}
//	<proxy>/<escaped module path>/@v/<version>.mod  the module's go.mod
//	<proxy>/<escaped module path>/@v/<version>.zip  the module zip
//
// The zip is made by golang.org/x/mod/zip, the go command's own rules for module zips: every
// file under a "<module>@<version>/" prefix, vendor directories, nested modules and version
// control directories left out, paths checked, 500 MB unzipped at most. Its entries are in
// path order with no timestamps or permissions, so the same files give the same bytes (with
// the same Go release: compress/flate's output is not promised across releases).
//
//	gomodzip -module github.com/libwool/libwool/bindings/go -version v0.5.0 \
//	    -dir <module files> -proxy <dist>/goproxy -time 2026-12-04T00:00:00Z
//
// It prints the zip's path, its size in bytes and the go.sum lines for this version (h1:
// hashes, as `go mod download -json` would give them).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

func main() {
	modPath := flag.String("module", "", "module path")
	version := flag.String("version", "", "canonical semantic version, e.g. v0.5.0")
	dir := flag.String("dir", "", "directory holding the module's files (its go.mod at the top)")
	proxy := flag.String("proxy", "", "root of the proxy tree to write into")
	stamp := flag.String("time", "", "the version's time for .info (RFC 3339)")
	flag.Parse()
	if err := run(*modPath, *version, *dir, *proxy, *stamp); err != nil {
		fmt.Fprintln(os.Stderr, "gomodzip:", err)
		os.Exit(1)
	}
}

func run(modPath, version, dir, proxy, stamp string) error {
	if modPath == "" || version == "" || dir == "" || proxy == "" || stamp == "" {
		return fmt.Errorf("-module, -version, -dir, -proxy and -time are all needed")
	}
	mv := module.Version{Path: modPath, Version: version}
	if err := module.Check(modPath, version); err != nil {
		return err
	}
	if semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not canonical (want e.g. v0.5.0)", version)
	}
	when, err := time.Parse(time.RFC3339, stamp)
	if err != nil {
		return fmt.Errorf("-time: %w", err)
	}
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	escaped, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}

	zipPath := filepath.Join(vdir, version+".zip")
	f, err := os.Create(zipPath)
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, mv, dir); err != nil {
		f.Close()
		os.Remove(zipPath)
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if _, err := zip.CheckZip(mv, zipPath); err != nil {
		return fmt.Errorf("the zip made fails the go command's checks: %w", err)
	}

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when.UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".info"), append(info, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".mod"), goMod, 0o644); err != nil {
		return err
	}
	if err := addToList(filepath.Join(vdir, "list"), version); err != nil {
		return err
	}

	zipHash, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return err
	}
	// The go.mod line's hash covers a single file named "go.mod" (as the go command hashes it).
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(goMod)), nil
	})
	if err != nil {
		return err
	}
	st, err := os.Stat(zipPath)
	if err != nil {
		return err
	}
	fmt.Printf("zip %s %d bytes\n", zipPath, st.Size())
	fmt.Printf("go.sum %s %s %s\n", modPath, version, zipHash)
	fmt.Printf("go.sum %s %s/go.mod %s\n", modPath, version, modHash)
	return nil
}

// addToList adds version to the proxy's list file, which keeps each version once, in semantic
// version order.
func addToList(path, version string) error {
	var versions []string
	if data, err := os.ReadFile(path); err == nil {
		versions = strings.Fields(string(data))
	} else if !os.IsNotExist(err) {
		return err
	}
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(path, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
