package keycache_test

import (
	"fmt"

	"github.com/watertight-go/watertight/internal/keycache"
)

func Example() {
	c := keycache.New[string](100)
	gen := uint64(1) // read before the lookup the cache saves
	c.Put("api.example", gen, "pipelines of api.example")
	v, g, ok := c.Get("api.example")
	fmt.Println(v, ok, g == gen) // current while the generation reads gen
	// Output:
	// pipelines of api.example true true
}
