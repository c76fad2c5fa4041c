//go:build woolpkgconfig && !woolstatic

package wool

// Dynamic linking (build tag woolpkgconfig) against the libwool that pkg-config finds as "wool":
// its wool.h and libwool.so, for hosts that install libwool system-wide (scripts/install.sh, or
// the release's C archive). See the package documentation for PKG_CONFIG_PATH, the run-time
// search path and the woolstatic build tag.

// #cgo pkg-config: wool
import "C"
