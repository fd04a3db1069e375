package main

import (
	"github.com/spf13/pflag"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/clientconn"
)

// serveTLSFlags are `surge serve`'s TLS flags.
func serveTLSFlags(f *pflag.FlagSet, env *envVars, files *api.TLSFiles) {
	f.StringVar(&files.Cert, "tls-cert", "", env.help("tls-cert", "SURGE_TLS_CERT", "PEM certificate (chain) of the listener: with --tls-key, HTTP/1.1, HTTP/2 and gRPC are served over TLS only (1.2 at least), and the files are read again when they change or on SIGHUP"))
	f.StringVar(&files.Key, "tls-key", "", env.help("tls-key", "SURGE_TLS_KEY", "PEM private key of --tls-cert"))
	f.StringVar(&files.ClientCA, "tls-client-ca", "", env.help("tls-client-ca", "SURGE_TLS_CLIENT_CA", "PEM CA certificates: with it, every client must present a certificate they signed (mutual TLS)"))
}

// clientFlags are the --ca-file and --token of surge ctl, worker and
// bench.
func clientFlags(f *pflag.FlagSet, o *clientconn.Options) {
	f.StringVar(&o.CAFile, "ca-file", envOr("SURGE_CA_FILE", ""), "PEM CA certificates to trust for an https:// server (default: the system's) (SURGE_CA_FILE)")
	f.StringVar(&o.Token, "token", envOr("SURGE_TOKEN", ""), "API token, sent as Authorization: Bearer; prefer the variable, which ps does not show (SURGE_TOKEN)")
}
