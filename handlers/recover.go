package handlers

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
)

// Recover is the panic recoverer of every HTTP route (the server's router
// and the REST API): a panic of a handler is logged with its stack and
// answered with a JSON 500 "internal". http.ErrAbortHandler is passed on
// (it aborts the response on purpose), and an upgrade request gets no
// answer (its connection may have been hijacked).
func Recover(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					log.Error("http handler panic", "method", r.Method, "path", r.URL.Path,
						"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
					if r.Header.Get("Connection") != "Upgrade" {
						WriteError(w, http.StatusInternalServerError, CodeInternal, "internal error")
					}
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}
