package main

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestDecodeIdle(t *testing.T) {
	msg := make([]byte, 9)
	msg[0] = 0x09
	binary.LittleEndian.PutUint64(msg[1:], math.Float64bits(1.25))
	if s, err := decodeIdle(msg); err != nil || s != 1.25 {
		t.Fatalf("9 bytes: got %v, %v", s, err)
	}
	if s, err := decodeIdle(nil); err != nil || s != 0 {
		t.Fatalf("empty (0.0 omitted): got %v, %v", s, err)
	}
	// an unknown varint field (2) before seconds is skipped
	if s, err := decodeIdle(append([]byte{0x10, 0x96, 0x01}, msg...)); err != nil || s != 1.25 {
		t.Fatalf("with an unknown field: got %v, %v", s, err)
	}
	if _, err := decodeIdle(msg[:5]); err == nil {
		t.Fatal("truncated: no error")
	}
}
