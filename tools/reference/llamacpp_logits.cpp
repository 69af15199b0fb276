// llamacpp_logits: evaluates a token sequence with llama.cpp (libllama, CPU) in ONE batch and writes the
// logits of every position as raw little-endian float32 [n_tokens][n_vocab].
//
//   llamacpp_logits MODEL.gguf OUT.f32 ID,ID,ID,... [--kv KEY=TYPE:VALUE]...
//
// --kv overrides one GGUF key at load time (llama_model_params.kv_overrides; TYPE is int, float, bool or
// str); the file is not changed. tests/data/arch uses it once for data:
// phi3.rope.scaling.original_context_length=int:512 makes llama.cpp pick the LongRoPE short factors at
// n_ctx 512 (it picks them by context size, not by sequence length). README.md also uses it to measure
// how much a wrong hyperparameter changes the logits.
//
// Settings (the same as the shared fixtures' __kvf32 files): model params = defaults with n_gpu_layers 0;
// context params = defaults with n_ctx = n_batch = n_ubatch = 512, n_threads = n_threads_batch = 1,
// flash attention off, F32 K and V cache. Positions 0..n-1, sequence 0, logits requested for every token.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void quiet_log(ggml_log_level level, const char *text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

static std::vector<llama_token> parse_ids(const char *s) {
    std::vector<llama_token> ids;
    const char *p = s;
    while (*p) {
        char *end = nullptr;
        long v = std::strtol(p, &end, 10);
        if (end == p) {
            std::fprintf(stderr, "bad token list near '%s'\n", p);
            std::exit(2);
        }
        ids.push_back(static_cast<llama_token>(v));
        p = end;
        if (*p == ',') ++p;
    }
    return ids;
}

int main(int argc, char **argv) {
    if (argc < 4 || (argc - 4) % 2 != 0) {
        std::fprintf(stderr, "usage: %s MODEL.gguf OUT.f32 ID,ID,... [--kv KEY=TYPE:VALUE]...\n", argv[0]);
        return 2;
    }
    const std::vector<llama_token> ids = parse_ids(argv[3]);
    const int n = static_cast<int>(ids.size());

    std::vector<llama_model_kv_override> overrides;
    for (int a = 4; a < argc; a += 2) {
        const std::string opt = argv[a], arg = argv[a + 1];
        const size_t eq = arg.find('='), colon = arg.find(':', eq == std::string::npos ? 0 : eq);
        if (opt != "--kv" || eq == std::string::npos || eq >= 127 || colon == std::string::npos) {
            std::fprintf(stderr, "bad option %s %s (want --kv KEY=TYPE:VALUE)\n", opt.c_str(), arg.c_str());
            return 2;
        }
        const std::string type = arg.substr(eq + 1, colon - eq - 1), val = arg.substr(colon + 1);
        llama_model_kv_override o{};
        std::memcpy(o.key, arg.data(), eq);
        if (type == "int") {
            o.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
            o.val_i64 = std::strtoll(val.c_str(), nullptr, 10);
        } else if (type == "float") {
            o.tag = LLAMA_KV_OVERRIDE_TYPE_FLOAT;
            o.val_f64 = std::strtod(val.c_str(), nullptr);
        } else if (type == "bool") {
            o.tag = LLAMA_KV_OVERRIDE_TYPE_BOOL;
            o.val_bool = val == "true";
        } else if (type == "str" && val.size() < sizeof(o.val_str)) {
            o.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
            std::memcpy(o.val_str, val.data(), val.size());
        } else {
            std::fprintf(stderr, "bad override type in %s\n", arg.c_str());
            return 2;
        }
        overrides.push_back(o);
    }
    if (!overrides.empty()) overrides.push_back(llama_model_kv_override{});  // key[0] == 0 ends the list

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.kv_overrides = overrides.empty() ? nullptr : overrides.data();
    mp.progress_callback = [](float, void *) { return true; };  // no progress dots
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot create a context\n");
        return 1;
    }

    const llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (llama_token t : ids) {
        if (t < 0 || t >= n_vocab) {
            std::fprintf(stderr, "token %d outside the vocab (%d)\n", t, n_vocab);
            return 1;
        }
    }

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (int rc = llama_decode(ctx, batch); rc != 0) {
        std::fprintf(stderr, "llama_decode failed: %d\n", rc);
        return 1;
    }

    FILE *f = std::fopen(argv[2], "wb");
    if (!f) {
        std::fprintf(stderr, "cannot write %s\n", argv[2]);
        return 1;
    }
    for (int i = 0; i < n; ++i) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row || std::fwrite(row, sizeof(float), n_vocab, f) != static_cast<size_t>(n_vocab)) {
            std::fprintf(stderr, "no logits for row %d\n", i);
            return 1;
        }
    }
    std::fclose(f);

    char desc[256];
    llama_model_desc(model, desc, sizeof(desc));
    std::printf("%s: %s, n_vocab %d, %d tokens -> %s\n", argv[1], desc, n_vocab, n, argv[2]);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
