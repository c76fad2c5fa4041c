//go:build !cgo

package wool

// The package is a cgo binding: without cgo (CGO_ENABLED=0, which is also the go command's
// default when cross-compiling) none of its code builds. This file turns that into one compile
// error that says so, instead of a list of undefined names.
var _ = libwool_needs_cgo__build_with_CGO_ENABLED_1_and_CC_set_to_a_C_compiler_for_the_target
