// Package web holds the admin panel's static files (pages, scripts,
// styles, the API's OpenAPI document), embedded in the binary so that the
// panel works offline. The admin package serves them.
package web

import "embed"

// FS holds index.html, login.html, openapi.json and static/.
//
//go:embed index.html login.html openapi.json static
var FS embed.FS
