// RWKV 6 / 7 as llama.cpp's GGUF: the tiny rwkv.cpp models written in the converter's layout
// (tools::write_rwkv_cpp_as_gguf) load through the GGUF path and give the rwkv.cpp file's logits (the same
// values, renamed and split as views, so the same floats); a rescaled v6 (rescale_every_n_layers) matches
// too; the World tokenizer from tokenizer.ggml.model "rwkv"; make-model's RWKV presets load and run; and a
// bad file (missing or misshaped tensor, missing key, unknown tensor) is one error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/model_logits.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "model/arch/architecture.h"
#include "model/tools/random_model.h"
#include "model/tools/rwkv_to_gguf.h"

namespace ga {
namespace {

std::string tiny(const std::string& name) { return test::shared_path("models/rwkv-tiny/tiny-rwkv-" + name + ".bin"); }

// rwkv.cpp's test prompt, token by token from the initial state, as tests/runtime/test_rwkv.cpp feeds it.
std::vector<float> logits_of(const LoadedModel& model, const std::vector<int32_t>& prompt = {'"', 'i', 'n'}) {
  return test::last_token_logits(model, prompt);
}

struct Case {
  const char* file;      // tiny-rwkv-<file>.bin
  const char* expected;  // expected-logits-<expected>.bin
  const char* arch;
};

class RwkvGguf : public ::testing::TestWithParam<Case> {};

TEST_P(RwkvGguf, ConvertedFileGivesTheRwkvCppFilesLogits) {
  const Case& c = GetParam();
  test::TempDir dir("ga_rwkv_gguf");
  const LoadedModel bin = load_model(tiny(c.file));
  const std::string path = dir.file("model.gguf");
  tools::write_rwkv_cpp_as_gguf(bin, path);

  const LoadedModel gguf = load_model(path);
  EXPECT_EQ(gguf.format, "gguf");
  EXPECT_EQ(gguf.config.arch, c.arch);
  EXPECT_EQ(gguf.config.n_embd, bin.config.n_embd);
  EXPECT_EQ(gguf.config.n_head, bin.config.n_head);
  EXPECT_EQ(gguf.config.n_ff, bin.config.n_ff);
  EXPECT_EQ(gguf.config.n_vocab, 256);
  EXPECT_EQ(gguf.vocab.type, VocabType::RwkvWorld);
  // the same tensors, by the forward's names, with the same bytes
  ASSERT_EQ(gguf.weights.size(), bin.weights.size());
  for (const auto& [name, w] : bin.weights) {
    const WeightView* g = gguf.find_weight(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->type, w.type) << name;
    ASSERT_EQ(g->nbytes, w.nbytes) << name;
    EXPECT_TRUE(std::equal(w.data, w.data + w.nbytes, g->data)) << name;
  }

  const std::vector<float> want = logits_of(bin);
  const std::vector<float> got = logits_of(gguf);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(test::max_abs_diff(got.data(), want.data(), want.size()), 0.0);
  const std::vector<float> expected =
      test::read_f32_file(test::shared_path(std::string("models/rwkv-tiny/expected-logits-") + c.expected + ".bin"));
  EXPECT_LT(test::rel_l2(got.data(), expected.data(), expected.size()), 2e-2);

  // The World tokenizer: id = byte for the tiny models, through the 'rwkv' GGUF vocabulary.
  const Tokenizer tok(gguf.vocab);
  EXPECT_EQ(tok.encode("in\n\"'\\", false), (std::vector<int32_t>{'i', 'n', '\n', '"', '\'', '\\'}));
}

INSTANTIATE_TEST_SUITE_P(Tiny, RwkvGguf,
                         ::testing::Values(Case{"6v0-3m-Q5_0", "6v0-3m", "rwkv6"}, Case{"6v0-3m-Q5_1", "6v0-3m", "rwkv6"},
                                           Case{"7v0-834K-FP32", "7v0-834K", "rwkv7"},
                                           Case{"7v0-834K-FP16", "7v0-834K", "rwkv7"}),
                         [](const auto& p) {
                           std::string n = p.param.file;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// The converter's rescaling (layer il's output matrices / 2^(il / n), the stream halved after every n-th layer)
// changes only the layer norms' eps terms: the logits stay those of the unscaled model.
TEST(RwkvGgufRescale, RescaledV6MatchesTheUnscaledModel) {
  test::TempDir dir("ga_rwkv_gguf");
  const LoadedModel bin = load_model(tiny("6v0-3m-Q5_1"));
  tools::RwkvToGgufOptions o;
  o.dequantize = true;  // exact values, in a type that can be divided
  const std::string plain = dir.file("plain.gguf"), rescaled = dir.file("rescaled.gguf");
  tools::write_rwkv_cpp_as_gguf(bin, plain, o);
  o.rescale_every = 2;
  tools::write_rwkv_cpp_as_gguf(bin, rescaled, o);
  const LoadedModel a = load_model(plain), b = load_model(rescaled);
  EXPECT_EQ(b.config.rwkv.rescale_every, 2);
  // layer 5's output matrix holds a quarter of the unscaled values
  const WeightView& w0 = a.weight("blocks.5.att.output.weight");
  const WeightView& w1 = b.weight("blocks.5.att.output.weight");
  ASSERT_EQ(w1.type, DType::F32);
  EXPECT_EQ(reinterpret_cast<const float*>(w1.data)[7], reinterpret_cast<const float*>(w0.data)[7] / 4.0f);
  const std::vector<float> want = logits_of(a), got = logits_of(b);
  EXPECT_LT(test::rel_l2(got.data(), want.data(), want.size()), 1e-3);
  LoadedModel unhalved = b;  // the control: the same file without the forward's halving is another model
  unhalved.config.rwkv.rescale_every = 0;
  const std::vector<float> off = logits_of(unhalved);
  EXPECT_GT(test::rel_l2(off.data(), want.data(), want.size()), 1e-2);
  const std::vector<float> quantized = logits_of(bin);
  EXPECT_LT(test::rel_l2(want.data(), quantized.data(), want.size()), 1e-4);  // the dequantized file: same values
}

// tokenizer.ggml.tokens of an 'rwkv' vocabulary hold Python's bytes repr; reading undoes it (llama.cpp's rule).
TEST(RwkvGgufTokenizer, ReprRoundTripsAndWorldLayout) {
  EXPECT_EQ(tools::rwkv_token_repr("\n\n"), "\\n\\n");
  EXPECT_EQ(tools::rwkv_token_repr("it's"), "it's");  // repr picks "..." and leaves ' alone
  EXPECT_EQ(tools::rwkv_token_repr("'\""), "\\'\"");
  EXPECT_EQ(tools::rwkv_token_repr("a\\b\t"), "a\\\\b\\t");
  EXPECT_EQ(tools::rwkv_token_repr("\xc3\xa9\xff"), "\\xc3\\xa9\\xff");

  Vocab world;  // what Vocab::from_rwkv_world gives: the end of text, then the file's tokens
  world.type = VocabType::RwkvWorld;
  world.tokens = {"<|endoftext|>"};
  for (int b = 0; b < 256; ++b) world.tokens.push_back(std::string(1, static_cast<char>(b)));
  // ids 257.. (the layout's '<s>' at 0 keeps every id of the file): "\n\n" at 261, as in rwkv_vocab_v20230424
  for (const char* t : {"it's", "'\"", "\\\\", " the", "\n\n", "\xe4\xbd\xa0\xe5\xa5\xbd"}) world.tokens.push_back(t);
  world.token_types.assign(world.tokens.size(), TokenType::Normal);
  world.token_types[0] = TokenType::Control;
  const int64_t n_vocab = 300;
  const Vocab laid_out = tools::rwkv_world_gguf_vocab(&world, n_vocab);
  ASSERT_EQ(static_cast<int64_t>(laid_out.tokens.size()), n_vocab);
  EXPECT_EQ(laid_out.tokens[0], "<s>");
  EXPECT_EQ(laid_out.tokens[299], "[PAD299]");
  EXPECT_EQ(laid_out.token_types[299], TokenType::Unused);

  test::TempDir dir("ga_rwkv_vocab");
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("rwkv7"));
  tools::write_rwkv_tokenizer(laid_out, w);
  w.write(dir.file("vocab.gguf"));
  const Vocab back = Vocab::from_gguf(gguf::File::open(dir.file("vocab.gguf")));
  EXPECT_EQ(back.type, VocabType::RwkvWorld);
  EXPECT_EQ(back.tokens, laid_out.tokens);
  EXPECT_EQ(back.eos_id, 0);
  EXPECT_EQ(back.eot_id, 261);
  EXPECT_FALSE(back.add_bos);
  const Tokenizer tok(back);
  EXPECT_EQ(back.tokens[259], "\\\\");
  // greedy longest match: "it's", " the", the two CJK characters and "\n\n" are one token each; a byte is its id + 1
  const std::vector<int32_t> ids = tok.encode("it's the \xe4\xbd\xa0\xe5\xa5\xbd\n\n", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{257, 260, 1 + ' ', 262, 261}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>(ids.begin(), ids.end() - 1)), "it's the \xe4\xbd\xa0\xe5\xa5\xbd");
}

// make-model's RWKV presets: llama.cpp's tensor names, shapes and types, and the file loads and runs here.
TEST(RwkvGgufMakeModel, TinyPresetsLoadAndRun) {
  test::TempDir dir("ga_rwkv_make");
  for (const char* preset : {"tiny-rwkv6", "tiny-rwkv7"}) {
    SCOPED_TRACE(preset);
    tools::MakeModelOptions o;
    o.preset = preset;
    o.type = "F16";
    o.n_threads = 2;
    const std::string path = dir.file(std::string(preset) + ".gguf");
    tools::make_random_model(path, o);
    const gguf::File f = gguf::File::open(path);
    const std::string arch = *f.get_string("general.architecture");
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "rwkv");
    EXPECT_EQ(f.get_int(arch + ".attention.head_count"), 0);
    EXPECT_EQ(f.get_int(arch + ".wkv.head_size"), 64);
    EXPECT_EQ(f.get_int(arch + ".context_length"), 1048576);
    const auto type_of = [&](const std::string& name) {
      const gguf::TensorInfo* t = f.find_tensor(name);
      EXPECT_NE(t, nullptr) << name;
      return t == nullptr ? DType::F32 : t->type;
    };
    EXPECT_EQ(type_of("token_embd.weight"), DType::F16);
    EXPECT_EQ(type_of("blk.1.time_mix_key.weight"), DType::F16);
    EXPECT_EQ(type_of("blk.1.time_mix_lerp_fused.weight"), DType::F32);
    EXPECT_EQ(type_of("blk.1.time_mix_w1.weight"), DType::F32);
    EXPECT_EQ(type_of("token_embd_norm.weight"), DType::F32);
    if (arch == "rwkv6") {
      EXPECT_EQ(f.get_int("rwkv6.rescale_every_n_layers"), 6);
      EXPECT_EQ(type_of("blk.0.time_mix_first.weight"), DType::F32);
      EXPECT_EQ(f.find_tensor("blk.0.time_mix_w2.weight")->ne, (std::vector<uint64_t>{32, 256, 5}));
    } else {
      EXPECT_EQ(type_of("blk.1.time_mix_a1.weight"), DType::F16);  // not in the converter's F32 list
      EXPECT_EQ(f.find_tensor("blk.0.time_mix_v1.weight")->ne, f.find_tensor("blk.0.time_mix_a1.weight")->ne);
      EXPECT_EQ(f.get_int("rwkv7.attention.gate_lora_rank"), 64);
    }
    const LoadedModel m = load_model(path);
    EXPECT_EQ(m.config.n_vocab, 1024);
    const Tokenizer tok(m.vocab);
    const std::vector<float> logits = logits_of(m, tok.encode("hello\n", false));
    ASSERT_EQ(logits.size(), 1024u);
    EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
  }
}

// The benchmark presets have the published models' shapes: LoRA widths as the HF configs / the converter's rules
// give them and parameter counts of the named sizes (from the GGUF tensor list, without writing the file).
TEST(RwkvGgufMakeModel, PresetsHaveThePublishedShapes) {
  struct Want {
    const char* preset;
    double billions_lo, billions_hi;
    int64_t lora[4];  // v6: time_mix_extra_dim, time_decay_extra_dim; v7: decay, iclr, value mix, gate
  };
  const Want wants[] = {
      {"rwkv6-1.6b", 1.5, 1.7, {32, 64, 0, 0}},      {"rwkv6-3b", 3.0, 3.2, {32, 64, 0, 0}},
      {"rwkv6-7b", 7.5, 7.8, {64, 128, 0, 0}},       {"rwkv7-1.5b", 1.45, 1.6, {96, 96, 64, 256}},  // fla-hub's config
      {"rwkv7-2.9b", 2.8, 3.0, {96, 96, 64, 320}},   {"rwkv7-7.2b", 7.1, 7.4, {128, 128, 96, 480}},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.preset);
    const tools::ModelPreset* p = tools::find_preset(w.preset);
    ASSERT_NE(p, nullptr);
    const ModelConfig c = tools::preset_config(*p, p->n_vocab);
    EXPECT_EQ(c.n_vocab, 65536);
    const RwkvParams& r = c.rwkv;
    if (c.arch == "rwkv6") {
      EXPECT_EQ(r.time_mix_extra_dim, w.lora[0]);
      EXPECT_EQ(r.time_decay_extra_dim, w.lora[1]);
    } else {
      EXPECT_EQ((std::vector<int64_t>{r.lora_decay, r.lora_iclr, r.lora_value_mix, r.lora_gate}),
                (std::vector<int64_t>(w.lora, w.lora + 4)));
    }
    double params = 0;
    for (const arch::TensorSpec& t : arch::arch_of(c).gguf_tensor_specs(c)) {
      double n = 1;
      for (const uint64_t d : t.ne) n *= static_cast<double>(d);
      params += n;
    }
    EXPECT_GT(params / 1e9, w.billions_lo);
    EXPECT_LT(params / 1e9, w.billions_hi);
  }
}

// A GGUF rewritten with one change: its keys and tensors pass through `edit_key` / `edit_tensor` (return false
// to drop one; a tensor may be given another name or shape).
struct Tensor {
  std::string name;
  DType type;
  std::vector<uint64_t> ne;
  std::vector<uint8_t> data;
};
void rewrite(const std::string& in, const std::string& out, const std::function<bool(gguf::KeyValue&)>& edit_key,
             const std::function<bool(Tensor&)>& edit_tensor, const std::vector<Tensor>& extra = {}) {
  const gguf::File f = gguf::File::open(in);
  gguf::Writer w;
  for (gguf::KeyValue kv : f.metadata()) {
    if (edit_key(kv)) w.set(kv.key, kv.value);
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    Tensor x{t.name, t.type, t.ne, std::vector<uint8_t>(f.tensor_data(t), f.tensor_data(t) + t.nbytes)};
    if (!edit_tensor(x)) continue;
    w.add_tensor(x.name, x.type, x.ne, x.data.data(), x.data.size());
  }
  for (const Tensor& x : extra) w.add_tensor(x.name, x.type, x.ne, x.data.data(), x.data.size());
  w.write(out);
}

std::string load_error(const std::string& path) {
  try {
    load_model(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(RwkvGgufErrors, BadFilesNameTheKeyOrTensor) {
  test::TempDir dir("ga_rwkv_bad");
  const std::string good = dir.file("good.gguf"), bad = dir.file("bad.gguf");
  tools::write_rwkv_cpp_as_gguf(load_model(tiny("7v0-834K-FP32")), good);
  const auto keep_keys = [](gguf::KeyValue&) { return true; };
  const auto keep_tensors = [](Tensor&) { return true; };

  rewrite(good, bad, keep_keys, [](Tensor& t) { return t.name != "blk.3.time_mix_key.weight"; });
  EXPECT_NE(load_error(bad).find("missing tensor blk.3.time_mix_key.weight"), std::string::npos) << load_error(bad);

  rewrite(good, bad, keep_keys, [](Tensor& t) {
    if (t.name == "blk.2.time_mix_w1.weight") t.ne = {t.ne[1], t.ne[0]};  // [64, 32] written as [32, 64]
    return true;
  });
  EXPECT_NE(load_error(bad).find("tensor blk.2.time_mix_w1.weight has shape [32, 64], expected [64, 32]"),
            std::string::npos)
      << load_error(bad);

  rewrite(good, bad, keep_keys, [](Tensor& t) {
    if (t.name == "blk.0.time_mix_k_k.weight") t.name = "blk.0.time_mix_kk.weight";
    return true;
  });
  EXPECT_NE(load_error(bad).find("blk.0.time_mix_k_k.weight"), std::string::npos) << load_error(bad);

  rewrite(good, bad, keep_keys, keep_tensors,
          {Tensor{"blk.1.time_mix_surprise.weight", DType::F32, {4}, std::vector<uint8_t>(16, 0)}});
  EXPECT_NE(load_error(bad).find("unexpected tensor blk.1.time_mix_surprise.weight"), std::string::npos)
      << load_error(bad);

  rewrite(good, bad, [](gguf::KeyValue& kv) { return kv.key != "rwkv7.wkv.head_size"; }, keep_tensors);
  EXPECT_NE(load_error(bad).find("missing key 'rwkv7.wkv.head_size'"), std::string::npos) << load_error(bad);

  rewrite(good, bad, [](gguf::KeyValue& kv) {
    if (kv.key == "rwkv7.wkv.head_size") kv.value = gguf::Value::u32(48);  // does not divide 64
    return true;
  }, keep_tensors);
  EXPECT_NE(load_error(bad).find("rwkv7.wkv.head_size"), std::string::npos) << load_error(bad);

  rewrite(good, bad, [](gguf::KeyValue& kv) {
    if (kv.key == "general.architecture") kv.value = gguf::Value::string("rwkv5");
    return true;
  }, keep_tensors);
  EXPECT_NE(load_error(bad).find("unsupported architecture 'rwkv5'"), std::string::npos) << load_error(bad);
}

}  // namespace
}  // namespace ga
