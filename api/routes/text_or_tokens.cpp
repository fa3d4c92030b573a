// api/routes/text_or_tokens.cpp: parsing the four forms of a texts-or-token-ids field.
#include "api/routes/text_or_tokens.h"

#include <limits>
#include <utility>

#include "api/json_fields.h"

namespace prism::api {

namespace {

std::string at(std::string_view base, std::size_t i) { return std::string(base) + "[" + std::to_string(i) + "]"; }

std::string forms(std::string_view field) {
  return std::string(field) +
         " must be a string, an array of strings, an array of token ids, or an array of arrays of token ids";
}

// One token id: a JSON integer that fits an int64 (the vocabulary check comes later).
Status read_token_id(const nlohmann::json& v, const std::string& name, int64_t& out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return invalid_argument(name + " is not a token id: " + v.dump() + " is out of range.");
    out = static_cast<int64_t>(v.get<uint64_t>());
    return {};
  }
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return {};
  }
  if (v.is_number()) return invalid_argument(name + " is " + v.dump() + ", not an integer token id.");
  return invalid_argument(name + " is " + json_type_name(v) + ", not an integer token id.");
}

Result<std::vector<int64_t>> read_token_array(const nlohmann::json& array, const std::string& name) {
  if (array.empty()) return invalid_argument(name + " is an empty token array.");
  std::vector<int64_t> ids(array.size());
  for (std::size_t j = 0; j < array.size(); ++j) PRISM_RETURN_IF_ERROR(read_token_id(array[j], at(name, j), ids[j]));
  return ids;
}

// The form of element i differs from element 0's.
Status mixed_forms(const nlohmann::json& value, std::string_view field, std::size_t i) {
  return invalid_argument(at(field, i) + " is " + json_type_name(value[i]) + " but " + at(field, 0) + " is " +
                          json_type_name(value[0]) + ": every element of " + std::string(field) +
                          " must have the same form (" + forms(field) + ").");
}

}  // namespace

std::string TextOrTokens::name(std::size_t i) const { return scalar ? field : at(field, i); }

Result<TextOrTokens> parse_text_or_tokens(const nlohmann::json& value, std::string_view field, std::string_view items,
                                          std::size_t max_items) {
  TextOrTokens out;
  out.field = std::string(field);
  if (value.is_string()) {
    if (value.get_ref<const std::string&>().empty()) return invalid_argument(out.field + " is an empty string.");
    out.scalar = true;
    out.texts.push_back(value.get<std::string>());
    return out;
  }
  if (!value.is_array()) return invalid_argument(forms(field) + "; got " + json_type_name(value) + ".");
  if (value.empty()) return invalid_argument(out.field + " is an empty array.");

  const nlohmann::json& first = value[0];
  if (first.is_number()) {  // one token array: its length is the model's business, not the count limit
    out.tokens = true;
    out.scalar = true;
    PRISM_ASSIGN_OR_RETURN(std::vector<int64_t> ids, read_token_array(value, out.field));
    out.token_ids.push_back(std::move(ids));
    return out;
  }
  if (value.size() > max_items)
    return invalid_argument(out.field + " has " + std::to_string(value.size()) + " elements; at most " +
                            std::to_string(max_items) + " " + std::string(items) + " are allowed per request.");
  if (first.is_string()) {
    out.texts.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string()) return mixed_forms(value, field, i);
      if (value[i].get_ref<const std::string&>().empty()) return invalid_argument(at(field, i) + " is an empty string.");
      out.texts.push_back(value[i].get<std::string>());
    }
    return out;
  }
  if (first.is_array()) {
    out.tokens = true;
    out.token_ids.reserve(value.size());
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_array()) return mixed_forms(value, field, i);
      PRISM_ASSIGN_OR_RETURN(std::vector<int64_t> ids, read_token_array(value[i], at(field, i)));
      out.token_ids.push_back(std::move(ids));
    }
    return out;
  }
  return invalid_argument(at(field, 0) + " is " + std::string(json_type_name(first)) + ": " + forms(field) + ".");
}

}  // namespace prism::api
