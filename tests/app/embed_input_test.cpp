// The bulk job's document readers: every format's documents, default ids and errors
// (FILE:LINE), and resume: opening at any position a reader returned yields exactly the
// documents after it.
#include "app/embed_input.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "test_util/paths.h"

namespace prism::app {
namespace {

std::string write(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

struct Doc {
  std::string id, text;
  int64_t line;
  InputPosition after;
};

Result<std::vector<Doc>> read_all(const std::string& path, const InputOptions& options = {},
                                  const InputPosition& start = {}) {
  PRISM_ASSIGN_OR_RETURN(InputFormat format, input_format_of(path));
  PRISM_ASSIGN_OR_RETURN(auto reader, DocumentReader::open(path, format, options, start));
  std::vector<Doc> docs;
  InputDocument d;
  for (;;) {
    PRISM_ASSIGN_OR_RETURN(bool got, reader->next(d));
    if (!got) break;
    docs.push_back({d.id, d.text, d.line, reader->position()});
  }
  return docs;
}

// Resuming after document k reads exactly documents k+1.. (ids, texts and lines).
void expect_resumes_everywhere(const std::string& path, const InputOptions& options = {}) {
  auto all = read_all(path, options);
  ASSERT_TRUE(all.has_value()) << all.status().message();
  for (size_t k = 0; k < all->size(); ++k) {
    auto rest = read_all(path, options, (*all)[k].after);
    ASSERT_TRUE(rest.has_value()) << rest.status().message();
    ASSERT_EQ(rest->size(), all->size() - k - 1) << "after document " << k;
    for (size_t j = 0; j < rest->size(); ++j) {
      EXPECT_EQ((*rest)[j].id, (*all)[k + 1 + j].id);
      EXPECT_EQ((*rest)[j].text, (*all)[k + 1 + j].text);
      EXPECT_EQ((*rest)[j].line, (*all)[k + 1 + j].line);
    }
  }
}

TEST(EmbedInput, FormatFromExtension) {
  EXPECT_EQ(input_format_of("a/docs.jsonl").value(), InputFormat::jsonl);
  EXPECT_EQ(input_format_of("docs.NDJSON").value(), InputFormat::jsonl);
  EXPECT_EQ(input_format_of("docs.txt").value(), InputFormat::txt);
  EXPECT_EQ(input_format_of("docs.csv").value(), InputFormat::csv);
  auto bad = input_format_of("docs.parquet");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find(".jsonl"), std::string::npos);
}

TEST(EmbedInput, TxtLinesAreDocumentsWithLineNumberIds) {
  const std::string dir = test::scratch_dir("embed_input_txt");
  // BOM, CRLF, a blank line (an empty document), no newline at the end.
  const std::string path = write(dir, "d.txt", "\xEF\xBB\xBFhello\r\nworld\n\nlast");
  auto docs = read_all(path);
  ASSERT_TRUE(docs.has_value()) << docs.status().message();
  ASSERT_EQ(docs->size(), 4u);
  EXPECT_EQ((*docs)[0].text, "hello");
  EXPECT_EQ((*docs)[1].text, "world");
  EXPECT_EQ((*docs)[2].text, "");
  EXPECT_EQ((*docs)[3].text, "last");
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*docs)[i].id, std::to_string(i));
    EXPECT_EQ((*docs)[i].line, static_cast<int64_t>(i + 1));
  }
  // Offsets: just after each line's terminator.
  EXPECT_EQ((*docs)[0].after.offset, 3 + 7);
  EXPECT_EQ((*docs)[1].after.offset, 3 + 7 + 6);
  EXPECT_EQ((*docs)[2].after.offset, 3 + 7 + 6 + 1);
  EXPECT_EQ((*docs)[3].after.offset, 3 + 7 + 6 + 1 + 4);
  expect_resumes_everywhere(path);
  // A final newline does not make one more document.
  auto two = read_all(write(dir, "e.txt", "a\nb\n"));
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->size(), 2u);
}

TEST(EmbedInput, JsonlObjectsStringsAndIds) {
  const std::string dir = test::scratch_dir("embed_input_jsonl");
  const std::string path = write(dir, "d.jsonl",
                                 "{\"id\": \"a\", \"text\": \"first\"}\n"
                                 "{\"text\": \"no id\"}\n"
                                 "\n"
                                 "\"a bare string\"\r\n"
                                 "{\"id\": 42, \"text\": \"integer id\", \"extra\": [1, 2]}\n"
                                 "{\"id\": null, \"text\": \"caf\\u00e9 \\\"quoted\\\"\\nnewline\"}");
  auto docs = read_all(path);
  ASSERT_TRUE(docs.has_value()) << docs.status().message();
  ASSERT_EQ(docs->size(), 5u);
  EXPECT_EQ((*docs)[0].id, "a");
  EXPECT_EQ((*docs)[0].text, "first");
  EXPECT_EQ((*docs)[1].id, "1");  // 0-based line number
  EXPECT_EQ((*docs)[2].id, "3");  // the blank line 2 holds no document but keeps its number
  EXPECT_EQ((*docs)[2].text, "a bare string");
  EXPECT_EQ((*docs)[2].line, 4);
  EXPECT_EQ((*docs)[3].id, "42");
  EXPECT_EQ((*docs)[4].id, "5");
  EXPECT_EQ((*docs)[4].text, "caf\xC3\xA9 \"quoted\"\nnewline");
  expect_resumes_everywhere(path);
}

TEST(EmbedInput, JsonlCustomFields) {
  const std::string dir = test::scratch_dir("embed_input_jsonl_fields");
  const std::string path = write(dir, "d.jsonl", "{\"doc_id\": \"x\", \"body\": \"b\"}\n");
  InputOptions o;
  o.text_field = "body";
  o.id_field = "doc_id";
  auto docs = read_all(path, o);
  ASSERT_TRUE(docs.has_value()) << docs.status().message();
  ASSERT_EQ(docs->size(), 1u);
  EXPECT_EQ((*docs)[0].id, "x");
  EXPECT_EQ((*docs)[0].text, "b");
}

// Each bad file fails naming FILE:LINE and the problem, after the good documents before it.
TEST(EmbedInput, JsonlErrorsNameFileAndLine) {
  const std::string dir = test::scratch_dir("embed_input_jsonl_errors");
  struct Case {
    std::string body;
    int line;
    std::string problem;
  };
  const Case cases[] = {
      {"{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", 2, "invalid JSON"},
      {"{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n", 3, "no string field \"text\""},
      {"{\"text\": 5}\n", 1, "no string field \"text\""},
      {"{\"text\": \"x\", \"id\": [1]}\n", 1, "must be a string or an integer"},
      {"[\"x\"]\n", 1, "expected a JSON object or string, got array"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string path = write(dir, "bad" + std::to_string(i) + ".jsonl", cases[i].body);
    auto reader = DocumentReader::open(path, InputFormat::jsonl, {});
    ASSERT_TRUE(reader.has_value());
    InputDocument d;
    Result<bool> got = true;
    InputPosition before;
    while (got.has_value() && got.value()) {
      before = reader.value()->position();
      got = reader.value()->next(d);
    }
    ASSERT_FALSE(got.has_value()) << "case " << i;
    const std::string m = got.status().message();
    EXPECT_NE(m.find(path + ":" + std::to_string(cases[i].line) + ": "), std::string::npos) << m;
    EXPECT_NE(m.find(cases[i].problem), std::string::npos) << m;
    // The position stays before the bad line (blank lines before it may be consumed).
    int64_t bad_line_start = 0;
    for (int l = 1; l < cases[i].line; ++l)
      bad_line_start = static_cast<int64_t>(cases[i].body.find('\n', bad_line_start)) + 1;
    EXPECT_GE(reader.value()->position().offset, before.offset);
    EXPECT_LE(reader.value()->position().offset, bad_line_start) << "an error does not move the position past it";
  }
}

TEST(EmbedInput, CsvQuotesNewlinesAndColumns) {
  const std::string dir = test::scratch_dir("embed_input_csv");
  const std::string path = write(dir, "d.csv",
                                 "id,title,text\r\n"
                                 "a,t1,plain\r\n"
                                 "b,\"t,2\",\"with, comma and \"\"quotes\"\"\"\r\n"
                                 "\r\n"
                                 "c,t3,\"two\r\nlines\"\n"
                                 "d,,\"\"\n"
                                 "e,t5,last without newline");
  auto docs = read_all(path);
  ASSERT_TRUE(docs.has_value()) << docs.status().message();
  ASSERT_EQ(docs->size(), 5u);
  EXPECT_EQ((*docs)[0].id, "a");
  EXPECT_EQ((*docs)[0].text, "plain");
  EXPECT_EQ((*docs)[1].text, "with, comma and \"quotes\"");
  EXPECT_EQ((*docs)[2].id, "c");
  EXPECT_EQ((*docs)[2].text, "two\nlines");
  EXPECT_EQ((*docs)[2].line, 5);
  EXPECT_EQ((*docs)[3].id, "d");
  EXPECT_EQ((*docs)[3].text, "");
  EXPECT_EQ((*docs)[3].line, 7);
  EXPECT_EQ((*docs)[4].text, "last without newline");
  expect_resumes_everywhere(path);
}

TEST(EmbedInput, CsvWithoutIdColumnUsesRecordNumbers) {
  const std::string dir = test::scratch_dir("embed_input_csv_noid");
  const std::string path = write(dir, "d.csv", "body\n\"x\ny\"\nz\n");
  InputOptions o;
  o.text_field = "body";
  auto docs = read_all(path, o);
  ASSERT_TRUE(docs.has_value()) << docs.status().message();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].id, "0");
  EXPECT_EQ((*docs)[1].id, "1");
  EXPECT_EQ((*docs)[1].line, 4);
  expect_resumes_everywhere(path, o);
}

TEST(EmbedInput, CsvErrorsNameFileAndLine) {
  const std::string dir = test::scratch_dir("embed_input_csv_errors");
  struct Case {
    std::string body;
    int line;
    std::string problem;
  };
  const Case cases[] = {
      {"id,text\na,b,c\n", 2, "3 fields, but the header has 2"},
      {"id,text\na,ok\nb,\"never\nclosed\n", 3, "never closed"},
      {"id,text\na,\"x\"y\n", 2, "after a closing quote"},
      {"id,body\na,b\n", 1, "no column \"text\" (columns: id, body)"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string path = write(dir, "bad" + std::to_string(i) + ".csv", cases[i].body);
    auto docs = read_all(path);
    ASSERT_FALSE(docs.has_value()) << "case " << i;
    const std::string m = docs.status().message();
    EXPECT_NE(m.find(path + ":" + std::to_string(cases[i].line) + ": "), std::string::npos) << m;
    EXPECT_NE(m.find(cases[i].problem), std::string::npos) << m;
  }
  auto empty = read_all(write(dir, "empty.csv", ""));
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.status().message().find("header"), std::string::npos);
}

TEST(EmbedInput, LimitsAndBadStarts) {
  const std::string dir = test::scratch_dir("embed_input_limits");
  const std::string path = write(dir, "d.txt", "short\n" + std::string(5000, 'x') + "\n");
  InputOptions o;
  o.max_document_bytes = 1000;
  auto docs = read_all(path, o);
  ASSERT_FALSE(docs.has_value());
  EXPECT_NE(docs.status().message().find(path + ":2: a line longer than 1000 bytes"), std::string::npos)
      << docs.status().message();

  InputPosition past;
  past.offset = 1 << 20;
  auto r = DocumentReader::open(path, InputFormat::txt, {}, past);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("not the input the job started with"), std::string::npos);
  EXPECT_FALSE(DocumentReader::open(dir + "/missing.txt", InputFormat::txt, {}).has_value());
}

// Larger than the reader's buffer: documents that straddle buffer refills come out whole.
TEST(EmbedInput, DocumentsAcrossBufferBoundaries) {
  const std::string dir = test::scratch_dir("embed_input_big");
  std::string body;
  std::vector<std::string> texts;
  for (int i = 0; i < 30000; ++i) {
    texts.push_back("document number " + std::to_string(i) + std::string(static_cast<size_t>(i % 97), 'z'));
    body += "{\"text\": \"" + texts.back() + "\"}\n";
  }
  const std::string path = write(dir, "d.jsonl", body);
  auto docs = read_all(path);
  ASSERT_TRUE(docs.has_value()) << docs.status().message();
  ASSERT_EQ(docs->size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) ASSERT_EQ((*docs)[i].text, texts[i]);
  EXPECT_EQ(docs->back().after.offset, static_cast<int64_t>(body.size()));
  auto rest = read_all(path, {}, (*docs)[20000].after);
  ASSERT_TRUE(rest.has_value());
  ASSERT_EQ(rest->size(), texts.size() - 20001);
  EXPECT_EQ(rest->front().text, texts[20001]);
  EXPECT_EQ(rest->front().id, "20001");
}

}  // namespace
}  // namespace prism::app
