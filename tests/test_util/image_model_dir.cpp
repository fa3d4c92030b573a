#include "test_util/image_model_dir.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "test_util/paths.h"

namespace prism::test {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

std::string ImageModelDir::write(const std::string& name) const {
  const fs::path dir = scratch_dir(name);
  write_text(dir / "model_index.json",
             nlohmann::json{{"_class_name", pipeline}, {"transformer", {"diffusers", "ZImageTransformer2DModel"}}}.dump());
  nlohmann::json blocks = nlohmann::json::array();
  for (int i = 0; i < vae_blocks; ++i) blocks.push_back(32 << std::min(i, 2));
  write_text(dir / "vae" / "config.json", nlohmann::json{{"block_out_channels", blocks}, {"latent_channels", 16}}.dump());
  write_text(dir / "transformer" / "config.json",
             nlohmann::json{{"_class_name", "ZImageTransformer2DModel"}, {"all_patch_size", {2}}, {"in_channels", 16}}.dump());
  fs::create_directories(dir / "tokenizer");
  fs::copy_file(fs::path(testdata_dir()) / "tokenizers" / "gpt2" / "tokenizer.json", dir / "tokenizer" / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  nlohmann::json config = {{"eos_token", "<|endoftext|>"}};
  // Qwen3's shape: a user turn, then the assistant's, with an empty think block unless thinking.
  if (chat_template)
    config["chat_template"] =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}";
  write_text(dir / "tokenizer" / "tokenizer_config.json", config.dump());
  return dir.string();
}

}  // namespace prism::test
