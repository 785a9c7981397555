# The layers (docs/design.md section 1) and what each may use: the folders
# whose headers it may include (tests/layering.cmake) and whose symbols its
# objects may reference (tests/layering_link.cmake). Lower layers first:
#   runtime/     runtime/, the public include/diffrt/
#   backends/*/  + backends/ref/ (the reference kernels), its own folder
#   text/        + runtime/: the tokenizer (include/diffrt/tokenizer.h)
#   model/       + runtime/, text/
#   session/     + text/, model/: sessions, batch sessions, the sampler,
#                the device weights their sessions share
#   conform/     + text/, model/, session/, backends/ref/
#   eval/        + text/, model/, session/: NIAH prompts and scoring, analysis
#   serve/       the public include/diffrt/ only, and its own folder
#   cli/         the public include/diffrt/, + conform/ (drt_conform.h), eval/,
#                serve/ (serve.h)
# include/diffrt/ in a list without runtime/ (serve, cli: above the library)
# means the functions the public headers declare, wherever the library
# defines them (tests/layering_link.cmake), and nothing else of it.
set(DRT_LAYERS runtime backends text model session conform eval serve cli)
set(allowed_runtime runtime include/diffrt)
set(allowed_backends runtime include/diffrt backends/ref)
set(allowed_text runtime include/diffrt text)
set(allowed_model runtime include/diffrt text model)
set(allowed_session runtime include/diffrt text model session)
set(allowed_conform runtime include/diffrt text model session backends/ref conform)
set(allowed_eval runtime include/diffrt text model session eval)
set(allowed_serve include/diffrt serve)
set(allowed_cli include/diffrt conform eval serve cli)
