package handlers_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/presenced/presenced/handlers"
)

// TestOpenAPIMatchesRoutes checks that the embedded document describes
// exactly the routes of the router: every route is documented and every
// documented operation is a route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Servers []struct{ URL string }                `json:"servers"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(handlers.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Fatalf("openapi = %q, want 3.0.3", doc.OpenAPI)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/v1" {
		t.Errorf("servers = %+v, want one with url /v1", doc.Servers)
	}

	operations := map[string]bool{
		"get": true, "put": true, "post": true, "delete": true,
		"options": true, "head": true, "patch": true, "trace": true,
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for key := range item {
			if operations[key] {
				documented[strings.ToUpper(key)+" "+path] = true
			}
		}
	}

	// With and without a service token the routes are the same (the
	// service routes answer 404 when off, but exist).
	for _, token := range []string{"svc-token", ""} {
		rest := handlers.NewREST(handlers.RESTDeps{ServiceToken: token})
		routed := map[string]bool{}
		err := chi.Walk(rest.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			routed[method+" "+route] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for r := range routed {
			if !documented[r] {
				t.Errorf("route %s is not in openapi.json", r)
			}
		}
		for d := range documented {
			if !routed[d] {
				t.Errorf("openapi.json documents %s, which is not a route", d)
			}
		}
		if len(routed) == 0 {
			t.Fatal("no routes walked")
		}
	}
}

// TestOpenAPIReferencesResolve checks every $ref points into the document
// and every operation declares its responses.
func TestOpenAPIReferencesResolve(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(handlers.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "$ref" {
					refs = append(refs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	if len(refs) == 0 {
		t.Fatal("no $ref found")
	}
	for _, ref := range refs {
		if !strings.HasPrefix(ref, "#/") {
			t.Errorf("$ref %q is not local", ref)
			continue
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = m[part]
		}
		if cur == nil {
			t.Errorf("$ref %q does not resolve", ref)
		}
	}

	comps := doc["components"].(map[string]any)
	schemes := comps["securitySchemes"].(map[string]any)
	for _, name := range []string{"bearerAuth", "serviceToken"} {
		if schemes[name] == nil {
			t.Errorf("security scheme %s missing", name)
		}
	}
	schemas := comps["schemas"].(map[string]any)
	for _, name := range []string{"Presence", "Member", "Error", "ConversationPresence", "Privacy"} {
		if schemas[name] == nil {
			t.Errorf("schema %s missing", name)
		}
	}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			o := op.(map[string]any)
			resp, _ := o["responses"].(map[string]any)
			if len(resp) == 0 {
				t.Errorf("%s %s has no responses", method, path)
			}
			if strings.HasPrefix(path, "/service/") {
				sec, _ := json.Marshal(o["security"])
				if string(sec) != `[{"serviceToken":[]}]` {
					t.Errorf("%s %s security = %s, want the service token", method, path, sec)
				}
			}
			for _, p := range pathParams(path) {
				found := false
				params, _ := o["parameters"].([]any)
				for _, prm := range params {
					ref, _ := prm.(map[string]any)["$ref"].(string)
					if strings.HasSuffix(ref, "/"+p) {
						found = true
					}
				}
				if !found {
					t.Errorf("%s %s does not declare path parameter %s", method, path, p)
				}
			}
		}
	}
}

func pathParams(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.Trim(seg, "{}"))
		}
	}
	slices.Sort(out)
	return out
}
