// The NFC requirement of Hugging Face tokenizers with an NFC normalizer (Qwen2).
//
// gpu_accel does not implement Unicode composition. Instead it proves that NFC would leave the text
// unchanged, which is the common case (keyboards and web text produce composed text), and refuses the
// rest with a clear error rather than tokenizing differently from the reference. The proof is the
// Unicode quick check (UAX #15) made exact for the MAYBE answers: a character that could compose with
// the preceding starter is accepted only when it is blocked from it, or when that starter has no
// decomposition and no composition with it exists. Anything undecidable this way is reported.
#pragma once

#include <string_view>

namespace ga::tok {

// True when NFC(text) == text is certain; false when it differs or cannot be proven.
// Invalid UTF-8 bytes count as U+FFFD (which NFC leaves unchanged).
bool is_nfc_stable(std::string_view text);

// Throws ga::Error(Unsupported) naming the byte offset when is_nfc_stable(text) is false.
void require_nfc(std::string_view text);

}  // namespace ga::tok
