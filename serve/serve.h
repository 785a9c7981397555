/* diffrt serve: an OpenAI-compatible HTTP server over a batch session
 * (docs/serve.md). */
#ifndef DRT_SRV_SERVE_H
#define DRT_SRV_SERVE_H

/* The `diffrt serve` command: parses argv (argv[0] is "serve"), serves until
 * SIGTERM or SIGINT, and returns the exit status. */
int srv_main(int argc, char **argv);

#endif
