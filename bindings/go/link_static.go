//go:build woolstatic

package wool

// Static linking (build tag woolstatic, with or without woolpkgconfig) against the libwool that
// pkg-config finds as "wool": `pkg-config --static` adds the system libraries a Rust static
// library needs (the .pc file's Libs.private). pkg-config's -lwool alone would still pick
// libwool.so when both libraries are installed side by side, so -l:libwool.a names the archive
// first (the linker searches pkg-config's -L directory for it too, whatever the order) and
// --as-needed lets the linker drop the then unused libwool.so instead of recording it as needed
// at run time.

// #cgo pkg-config: --static wool
// #cgo LDFLAGS: -l:libwool.a -Wl,--as-needed
import "C"
