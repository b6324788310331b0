package dashboard_test

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/watertight-go/watertight/circuit"
	"github.com/watertight-go/watertight/dashboard"
	"github.com/watertight-go/watertight/watch"
)

// Mount the dashboard under /dashboard/ of a server bound to 127.0.0.1, and
// give it to the protections as their listener.
func Example() {
	set := new(watch.Set) // also for watertightprom.Config.Sources, watertightotel.Config.Sources
	d, err := dashboard.New(dashboard.Config{Sources: set, Title: "shop"})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	payments, _ := circuit.New(circuit.Config{Name: "payments", Listener: d})
	set.AddBreaker(payments)

	mux := http.NewServeMux()
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
	// A program would run http.ListenAndServe("127.0.0.1:8080", mux) and
	// open http://127.0.0.1:8080/dashboard/ ; the test server listens on
	// 127.0.0.1 too.
	srv := httptest.NewServer(mux)
	defer srv.Close()

	payments.ForceOpen()
	resp, err := http.Get(srv.URL + "/dashboard/state.json")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var state struct {
		Rows []struct{ Kind, Group, State, Level, Code string }
	}
	json.NewDecoder(resp.Body).Decode(&state)
	for _, r := range state.Rows {
		fmt.Println(r.Kind, r.Group, r.State, r.Level, r.Code)
	}
	// Output:
	// circuit payments forced-open bad manual
}

// The dashboard is read-only, but what it shows (names, hosts, error
// rates) is for operators: put it behind authentication when it is
// reachable by anyone else than the machine's own users.
func Example_behindAuth() {
	d, err := dashboard.New(dashboard.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	user, pass := "ops", "a long random secret"
	protected := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="dashboard"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		d.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(http.StripPrefix("/dashboard", protected)) // 127.0.0.1
	defer srv.Close()

	resp, _ := http.Get(srv.URL + "/dashboard/")
	resp.Body.Close()
	fmt.Println("without credentials:", resp.StatusCode)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/dashboard/", nil)
	req.SetBasicAuth(user, pass)
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	fmt.Println("with them:", resp.StatusCode)
	// Output:
	// without credentials: 401
	// with them: 200
}
