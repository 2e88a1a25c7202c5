package web_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/presenced/presenced/web"
)

// The pages must work under the panel's Content-Security-Policy
// (script-src 'self'; style-src 'self'): no inline script, no inline
// style, no event handler attributes, nothing from another origin.
func TestPagesFitTheCSP(t *testing.T) {
	for _, name := range []string{"index.html", "login.html"} {
		b, err := fs.ReadFile(web.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
			if !strings.Contains(tag, ` src="/admin/static/`) {
				t.Errorf("%s: script %q is not one of the panel's files", name, tag)
			}
		}
		for _, bad := range []*regexp.Regexp{
			regexp.MustCompile(`<script(?:\s[^>]*)?>[^<\s]`),   // inline script
			regexp.MustCompile(`<style`),                       // inline style sheet
			regexp.MustCompile(`\sstyle=`),                     // style attribute
			regexp.MustCompile(`\son[a-z]+=`),                  // event handler attribute
			regexp.MustCompile(`(?:src|href)="(?:https?:)?//`), // another origin (a CDN)
		} {
			if m := bad.FindString(page); m != "" {
				t.Errorf("%s: %q", name, m)
			}
		}
	}
	for _, name := range []string{"static/app.js", "static/login.js", "static/style.css", "static/icon.svg", "openapi.json"} {
		b, err := fs.ReadFile(web.FS, name)
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v", name, err)
		}
		if strings.HasSuffix(name, ".js") && strings.Contains(string(b), "innerHTML") {
			t.Errorf("%s sets innerHTML: build the DOM with textContent", name)
		}
	}
}
