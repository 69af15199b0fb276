// Unicode Normalization Form C (UAX #15), the normalizer of Hugging Face tokenizers such as Qwen2's.
//
// Why it is built this way: almost all text a tokenizer sees is already NFC (keyboards and the web
// produce composed text), so the work is organised around a quick check. The text is scanned once with
// the NFC_QC property and the canonical combining classes; spans that pass are never copied into a new
// form. Only a span around a character that fails (NFC_QC No or Maybe, or marks out of canonical order)
// is normalized, from the last "boundary" code point before it (class 0, NFC_QC=Yes: nothing after it can
// reach back across it) to the next one. That span gets the full algorithm: recursive canonical
// decomposition (Hangul syllables algorithmically), canonical ordering of each run of non-starters, and
// canonical composition with the "blocked" rule and the composition exclusions.
//
// Input and output are UTF-8. Invalid UTF-8 bytes pass through unchanged, like in the rest of the
// tokenizer (which encodes them byte by byte): each acts as a starter that composes with nothing, so
// neither side of it is changed by its presence.
#pragma once

#include <string>
#include <string_view>

namespace ga::tok {

// NFC(text).
std::string to_nfc(std::string_view text);

// Hot-path form: returns `text` itself (no copy) when it is already NFC by the quick check; otherwise
// writes NFC(text) into `storage` and returns a view of it.
std::string_view to_nfc(std::string_view text, std::string& storage);

// True when NFC(text) == text.
bool is_nfc_stable(std::string_view text);

// The full algorithm applied to the whole text at once, without the quick check or the splitting into
// spans. Slow; it exists so tests can prove the fast path equals the plain UAX #15 definition.
std::string to_nfc_unsegmented(std::string_view text);

}  // namespace ga::tok
