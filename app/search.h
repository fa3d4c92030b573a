// app/search.h: `prism search`: the nearest documents of an embedding folder (`prism embed`
// output) to query texts, embedded in-process by the folder's model.
//   prism search --index OUT --model DIR --query TEXT [--query TEXT ...] [-k 10] [--json]
// Prints, per query, one "ID<TAB>SCORE" line per hit, closest first (queries separated by a
// blank line); --json prints one {"query", "results": [{"id", "score"}]} object per query.
// Scores: cosine similarity for normalised models, squared L2 distance otherwise.
// The model must be of the folder's embedding space (refused otherwise, exit 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace prism::app {

struct SearchOptions {
  std::string index;                 // embedding folder
  std::string model;                 // Hugging Face model directory
  std::vector<std::string> queries;  // at least one
  int64_t k = 10;
  std::string precision;  // empty: the folder's
  bool truncate = false;
  bool json = false;
};

CLI::App* add_search_command(CLI::App& app, SearchOptions& options);
int run_search(const SearchOptions& options);  // exit code; messages on stderr

}  // namespace prism::app
