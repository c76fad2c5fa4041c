//go:build !woolstatic

package wool

// Dynamic linking (the default) against the libwool that pkg-config finds as "wool": its
// wool.h and libwool.so. See the package documentation for PKG_CONFIG_PATH, the run-time
// search path and the woolstatic build tag.

// #cgo pkg-config: wool
import "C"
