package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/go-yaml"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

// contract is openapi.yaml built once for the package's tests: its model,
// and a validator of the responses of every test's calls.
var contract struct {
	once  sync.Once
	err   error
	doc   libopenapi.Document
	model *v3.Document
	mu    sync.Mutex // the validator is not documented as safe for concurrent use
	check validator.Validator
	// errorBody is the schema of the Error responses the routes' fallbacks
	// give (405 and 404, outside any operation).
	errorBody map[int]*base.Schema
	// events is, for each stream ("GET /v1/locks/{name}/watch"), the
	// schema of each event kind's data: its media type's x-events.
	events map[string]map[string]*base.Schema
}

func loadContract(t testing.TB) {
	t.Helper()
	contract.once.Do(func() {
		doc, err := libopenapi.NewDocument(openapiYAML)
		if err != nil {
			contract.err = err
			return
		}
		m, err := doc.BuildV3Model()
		if err != nil {
			contract.err = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			contract.err = errs[0]
			return
		}
		contract.doc, contract.model, contract.check = doc, &m.Model, v
		contract.errorBody = map[int]*base.Schema{}
		for status, name := range map[int]string{http.StatusMethodNotAllowed: "MethodNotAllowed", http.StatusNotFound: "NotFound"} {
			resp := m.Model.Components.Responses.GetOrZero(name)
			if resp == nil {
				contract.err = &valerrors.ValidationError{Message: "components.responses." + name + " is missing"}
				return
			}
			contract.errorBody[status] = resp.Content.GetOrZero("application/json").Schema.Schema()
		}
		contract.events, contract.err = streamEvents(&m.Model)
	})
	require.NoError(t, contract.err, "openapi.yaml does not build")
}

// streamEvents reads the x-events of every text/event-stream response:
// event kind → a $ref to the schema of its data.
func streamEvents(m *v3.Document) (map[string]map[string]*base.Schema, error) {
	out := map[string]map[string]*base.Schema{}
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code, resp := range op.Responses.Codes.FromOldest() {
				if resp.Content == nil { // a 204
					continue
				}
				mt := resp.Content.GetOrZero("text/event-stream")
				if mt == nil {
					continue
				}
				where := strings.ToUpper(method) + " " + path + " " + code
				node := mt.Extensions.GetOrZero("x-events")
				var refs map[string]struct {
					Ref string `yaml:"$ref"`
				}
				if node == nil || node.Decode(&refs) != nil || len(refs) == 0 {
					return nil, fmt.Errorf("%s: text/event-stream without x-events (kind: {$ref: schema})", where)
				}
				kinds := map[string]*base.Schema{}
				for kind, r := range refs {
					sp := m.Components.Schemas.GetOrZero(strings.TrimPrefix(r.Ref, "#/components/schemas/"))
					if sp == nil {
						return nil, fmt.Errorf("%s: x-events %s: no schema %q", where, kind, r.Ref)
					}
					kinds[kind] = sp.Schema()
				}
				out[strings.ToUpper(method)+" "+path] = kinds
			}
		}
	}
	return out, nil
}

func describe(errs []*valerrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n\t" + e.Message + ": " + e.Reason)
		for _, f := range e.SchemaValidationErrors {
			b.WriteString("\n\t\t" + f.Error())
		}
	}
	return b.String()
}

// The description is OpenAPI 3.1 as the validator library reads it, and
// docs/openapi.yaml is the same file, byte for byte.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	loadContract(t)
	require.Equal(t, "3.1.0", contract.model.Version)
	ok, errs := contract.check.ValidateDocument()
	require.True(t, ok, "openapi.yaml is not a valid OpenAPI 3.1 document:%s", describe(errs))

	docs, err := os.ReadFile("../docs/openapi.yaml")
	require.NoError(t, err)
	require.True(t, bytes.Equal(openapiYAML, docs),
		"docs/openapi.yaml differs from httpapi/openapi.yaml, the one the server embeds: cp httpapi/openapi.yaml docs/openapi.yaml")
}

// docPath is the path the description gives a route's mux pattern.
func docPath(pattern string) string {
	return strings.TrimSuffix(pattern, "{$}")
}

// Every route the server registers (each path and method of its route
// table) is in the description, and the description has no other; public
// routes, and only they, need no bearer token there. The document itself
// is served at GET /v1/openapi.yaml without a token, as YAML.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	loadContract(t)
	net := transport.NewNetwork(1)
	n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: net.Addr(1)},
		Dir: t.TempDir(), Transport: net})
	require.NoError(t, err)
	defer n.Close()
	acl, err := ParseTokens([]byte("admin-token\n"))
	require.NoError(t, err)
	s := New(n, WithACL(acl))
	defer s.Close()

	code := map[string]bool{} // "METHOD path" → public
	for _, rt := range s.routeTable() {
		for m := range rt.methods {
			code[m+" "+docPath(rt.path)] = rt.public
		}
	}
	doc := map[string]bool{} // "METHOD path" → public (security: [])
	for path, item := range contract.model.Paths.PathItems.FromOldest() {
		for m, op := range item.GetOperations().FromOldest() {
			doc[strings.ToUpper(m)+" "+path] = op.Security != nil && len(op.Security) == 0
		}
	}
	var missing, extra, public []string
	for k, pub := range code {
		d, ok := doc[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case d != pub:
			public = append(public, k+" (public: "+strconv.FormatBool(pub)+")")
		}
	}
	for k := range doc {
		if _, ok := code[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(public)
	assert.Empty(t, missing, "routes the server registers that openapi.yaml does not describe")
	assert.Empty(t, extra, "operations openapi.yaml describes that the server does not register")
	assert.Empty(t, public, "routes whose need of a bearer token the description gets wrong (public: security: [])")

	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.yaml")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "application/yaml", resp.Header.Get("Content-Type"))
	require.Equal(t, openapiYAML, body)
}

// errorCodes reads the API's error codes from errors.go: the values of its
// Code constants.
func errorCodes(t *testing.T) []string {
	t.Helper()
	var codes []string
	for _, c := range codeConsts(t) {
		codes = append(codes, c.value)
	}
	require.NotEmpty(t, codes, "no Code constants found in errors.go")
	return codes
}

// codeConst is one Code constant of errors.go.
type codeConst struct {
	name, value string
	comment     string // its line comment ("409: ..."); "" without one
}

// codeConsts reads errors.go's Code constants, each a string literal.
func codeConsts(t *testing.T) []codeConst {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, parser.ParseComments)
	require.NoError(t, err)
	var out []codeConst
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, sp := range gd.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				require.True(t, ok, "%s is not a string literal", name.Name)
				v, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				c := codeConst{name: name.Name, value: v}
				if vs.Comment != nil {
					c.comment = strings.TrimSpace(vs.Comment.Text())
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// docCodes collects the error codes the description names: the enum or
// const of every "code" property, anywhere in it.
func docCodes(node any, into map[string]bool) {
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if k == "code" {
				if m, ok := v.(map[string]any); ok {
					if c, ok := m["const"].(string); ok {
						into[c] = true
					}
					if e, ok := m["enum"].([]any); ok {
						for _, c := range e {
							into[c.(string)] = true
						}
					}
				}
			}
			docCodes(v, into)
		}
	case []any:
		for _, v := range n {
			docCodes(v, into)
		}
	}
}

// Every error code the description names is one errors.go defines, and
// every code errors.go defines is in the description.
func TestOpenAPIErrorCodes(t *testing.T) {
	var root any
	require.NoError(t, yaml.Unmarshal(openapiYAML, &root))
	named := map[string]bool{}
	docCodes(root, named)
	codes := errorCodes(t)
	var unknown, undocumented []string
	for c := range named {
		if !slices.Contains(codes, c) {
			unknown = append(unknown, c)
		}
	}
	for _, c := range codes {
		if !named[c] {
			undocumented = append(undocumented, c)
		}
	}
	sort.Strings(unknown)
	sort.Strings(undocumented)
	assert.Empty(t, unknown, "codes openapi.yaml names that errors.go does not define")
	assert.Empty(t, undocumented, "codes errors.go defines that openapi.yaml does not name")
}

// recorder passes a response through and keeps what the validator needs:
// the status, the headers as sent, and a JSON body.
type recorder struct {
	http.ResponseWriter
	status int
	header http.Header
	keep   bool // JSON, or a stream's events: the body is checked
	body   bytes.Buffer
}

// maxKept bounds the bytes of a stream a recorder keeps: its first events
// are checked, the rest passed on only.
const maxKept = 1 << 20

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status, r.header = code, r.ResponseWriter.Header().Clone()
		ct := r.header.Get("Content-Type")
		r.keep = strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "text/event-stream")
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.keep && r.body.Len() < maxKept {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// ValidateResponses wraps api, so that every response it gives is
// validated against openapi.yaml: its status must be one its operation
// lists, its media type one the status lists, and a JSON body must match
// the schema. Each response that does not fails t when t ends (a Cleanup,
// registered now: so it runs after cleanups registered later, such as the
// servers' Close). A method or path no operation has is answered by the
// route table's fallbacks: 405 or 404 with the Error body, checked so.
//
// Bodies are checked for JSON, and the SSE streams (text/event-stream)
// event by event, each kind's data against its schema in the media type's
// x-events (the first MiB of a stream). The dashboard's page (text/html),
// /metrics, the snapshot and the document itself have their status and
// media type checked, not their bytes. HEAD is not checked: Go's mux
// answers it as the GET, without the body. api is a *Server, or a handler
// that passes each request on to one's ServeHTTP (fencelocktest's
// endpoint): the route a request took is the Pattern its mux sets on it.
func ValidateResponses(t testing.TB, api http.Handler) http.Handler {
	t.Helper()
	loadContract(t)
	var (
		mu       sync.Mutex
		failures []string
		wg       sync.WaitGroup
	)
	t.Cleanup(func() {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for i, f := range failures {
			if i == 10 {
				t.Errorf("... and %d more responses that openapi.yaml does not describe", len(failures)-i)
				break
			}
			t.Errorf("a response openapi.yaml does not describe: %s", f)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			api.ServeHTTP(w, r)
			return
		}
		req := r.Clone(context.Background())
		req.Body = http.NoBody
		rec := &recorder{ResponseWriter: w}
		api.ServeHTTP(rec, r)
		pattern := r.Pattern
		if rec.status == 0 {
			rec.status, rec.header = http.StatusOK, w.Header().Clone()
		}
		wg.Add(1)
		go func() { // off the request's path: a test's timing is not the validator's
			defer wg.Done()
			if msg := validate(req, pattern, rec); msg != "" {
				mu.Lock()
				failures = append(failures, req.Method+" "+req.URL.String()+" answered "+strconv.Itoa(rec.status)+": "+
					msg+"\n\tbody: "+fmt.Sprintf("%.500s", strings.TrimSpace(rec.body.String())))
				mu.Unlock()
			}
		}()
	})
}

// validate checks one response; "" when it conforms.
func validate(req *http.Request, pattern string, rec *recorder) string {
	contract.mu.Lock()
	defer contract.mu.Unlock()
	if !strings.Contains(pattern, " ") { // a route's method-less fallback, or "/": no operation
		schema := contract.errorBody[rec.status]
		if schema == nil {
			return "outside every operation (mux pattern " + strconv.Quote(pattern) + "), and not a 404 or 405"
		}
		if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(schema, rec.body.Bytes()); !ok {
			return "not the Error body:" + describe(errs)
		}
		return ""
	}
	resp := &http.Response{StatusCode: rec.status, Header: rec.header, Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Request: req}
	if ok, errs := contract.check.ValidateHttpResponse(req, resp); !ok {
		return describe(errs)
	}
	if strings.HasPrefix(rec.header.Get("Content-Type"), "text/event-stream") {
		return validateEvents(contract.events[pattern], rec.body.String())
	}
	return ""
}

// validateEvents checks each whole event of a stream: a kind its x-events
// lists, and data that matches the kind's schema. Comments (": ping") and
// an event cut off at the end are skipped.
func validateEvents(kinds map[string]*base.Schema, stream string) string {
	if kinds == nil {
		return "a stream with no x-events in openapi.yaml"
	}
	blocks := strings.Split(stream, "\n\n")
	var bad []string
	for _, b := range blocks[:len(blocks)-1] {
		var kind, data string
		for _, line := range strings.Split(b, "\n") {
			if k, ok := strings.CutPrefix(line, "event: "); ok {
				kind = k
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = d
			}
		}
		if kind == "" {
			continue
		}
		schema := kinds[kind]
		if schema == nil {
			bad = append(bad, "event "+strconv.Quote(kind)+" is not in x-events")
			continue
		}
		if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaString(schema, data); !ok {
			bad = append(bad, "event "+kind+" "+data+":"+describe(errs))
		}
	}
	return strings.Join(bad, "\n\t")
}
