package watertightconfig

import (
	"os"
	"testing"
)

func BenchmarkParseExample(b *testing.B) {
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("example.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// A lookup is what a caller does per use, to see reloads: one atomic
// load and a map read.
func BenchmarkRegistryBreaker(b *testing.B) {
	f, err := Load("testdata/example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewRegistry(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Breaker("payment"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := r.Breaker("payment"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkReloadUnchanged(b *testing.B) {
	f, err := Load("testdata/example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewRegistry(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Reload(f); err != nil {
			b.Fatal(err)
		}
	}
}
