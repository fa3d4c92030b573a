// tests/api/multipart_test.cpp: the multipart/form-data parser on hand-written bodies,
// including the malformed ones a client can send.
#include "api/multipart.h"

#include <gtest/gtest.h>

namespace prism::api {
namespace {

using namespace std::string_literals;

const std::string kType = "multipart/form-data; boundary=XyZ";

std::string audio_body() {
  return "preamble to ignore\r\n"
         "--XyZ\r\n"
         "Content-Disposition: form-data; name=\"model\"\r\n"
         "\r\n"
         "whisper-1\r\n"
         "--XyZ\r\n"
         "Content-Disposition: form-data; name=\"file\"; filename=\"a b.wav\"\r\n"
         "Content-Type: audio/wav\r\n"
         "\r\n"
         "RIFF\r\n--Xy\0\xff-bytes\r\n"
         "--XyZ--\r\n"
         "epilogue"s;  // s: the body holds a NUL byte
}

TEST(Multipart, FieldsAndFile) {
  const std::string body = audio_body();
  Result<MultipartForm> form = parse_multipart(kType, body);
  ASSERT_TRUE(form.has_value()) << form.status().to_string();
  ASSERT_EQ(form->parts.size(), 2u);
  const MultipartPart* model = form->find("model");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->data, "whisper-1");
  EXPECT_FALSE(model->is_file);
  const MultipartPart* file = form->find("file");
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(file->is_file);
  EXPECT_EQ(file->filename, "a b.wav");
  EXPECT_EQ(file->content_type, "audio/wav");
  // Binary content, CRLF and a near-boundary inside the data are kept byte for byte.
  EXPECT_EQ(file->data, std::string("RIFF\r\n--Xy\0\xff-bytes", 18));
  EXPECT_EQ(form->find("missing"), nullptr);
}

TEST(Multipart, QuotedBoundaryAndEmptyValues) {
  const std::string body =
      "--a:b c\r\nContent-Disposition: form-data; name=\"empty\"\r\n\r\n\r\n"
      "--a:b c\r\nContent-Disposition: form-data; name=\"f\"; filename=\"\"\r\n\r\n\r\n"
      "--a:b c--";
  Result<MultipartForm> form = parse_multipart("multipart/form-data; boundary=\"a:b c\"", body);
  ASSERT_TRUE(form.has_value()) << form.status().to_string();
  ASSERT_EQ(form->parts.size(), 2u);
  EXPECT_EQ(form->parts[0].data, "");
  EXPECT_TRUE(form->parts[1].is_file);
  EXPECT_EQ(form->parts[1].filename, "");
}

TEST(Multipart, HeaderNamesAreCaseInsensitive) {
  const std::string body =
      "--B\r\ncontent-disposition: FORM-DATA; NAME=x\r\ncontent-type: text/plain\r\n\r\n1\r\n--B--\r\n";
  Result<MultipartForm> form = parse_multipart("Multipart/Form-Data; Boundary=B", body);
  ASSERT_TRUE(form.has_value()) << form.status().to_string();
  EXPECT_EQ(form->parts.at(0).name, "x");
  EXPECT_EQ(form->parts.at(0).data, "1");
}

// Each malformed body is refused with a message that names the problem.
struct BadCase {
  std::string content_type;
  std::string body;
  std::string expected_in_message;
};

TEST(Multipart, MalformedBodiesNameTheProblem) {
  const std::string cd = "Content-Disposition: form-data; name=\"f\"\r\n";
  const std::vector<BadCase> cases = {
      {"multipart/form-data", "--B\r\n" + cd + "\r\nx\r\n--B--", "no boundary"},
      {"multipart/form-data; boundary=", "--B\r\n", "no boundary"},
      {"application/json", "{}", "must be multipart/form-data"},
      {"multipart/form-data; boundary=" + std::string(71, 'b'), "", "1 to 70"},
      {"multipart/form-data; boundary=\"B", "", "unterminated"},
      {kType, "no boundary here", "does not contain the boundary"},
      {kType, "--XyZ\r\n" + cd + "\r\ntruncated data", "truncated"},
      {kType, "--XyZ\r\n" + cd + "\r\nx\r\n--XyZ\r\n" + cd + "\r\nsecond", "part 2 ('f') has no closing boundary"},
      {kType, "--XyZ\r\nContent-Disposition: form-data; name=\"f\"\r\n", "never end"},
      {kType, "--XyZ\r\n\r\nx\r\n--XyZ--", "no Content-Disposition"},
      {kType, "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--", "no Content-Disposition"},
      {kType, "--XyZ\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\nx\r\n--XyZ--", "expected 'form-data'"},
      {kType, "--XyZ\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nx\r\n--XyZ--", "no field name"},
      {kType, "--XyZ\r\nno colon here\r\n\r\nx\r\n--XyZ--", "malformed header"},
      {kType, "--XyZgarbage\r\n" + cd + "\r\nx\r\n--XyZ--", "not followed by CRLF"},
      {kType, "--XyZ", "truncated"},
  };
  for (const BadCase& c : cases) {
    Result<MultipartForm> form = parse_multipart(c.content_type, c.body);
    ASSERT_FALSE(form.has_value()) << c.body;
    EXPECT_EQ(form.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(form.status().message().find(c.expected_in_message), std::string::npos)
        << "body: " << c.body << "\nmessage: " << form.status().message();
  }
}

TEST(Multipart, TooManyParts) {
  std::string body;
  for (int i = 0; i < 5; ++i) body += "--B\r\nContent-Disposition: form-data; name=\"p\"\r\n\r\nv\r\n";
  body += "--B--";
  EXPECT_TRUE(parse_multipart("multipart/form-data; boundary=B", body, 5).has_value());
  Result<MultipartForm> form = parse_multipart("multipart/form-data; boundary=B", body, 4);
  ASSERT_FALSE(form.has_value());
  EXPECT_NE(form.status().message().find("more than 4 parts"), std::string::npos);
}

TEST(Multipart, EmptyFormIsValid) {
  Result<MultipartForm> form = parse_multipart("multipart/form-data; boundary=B", "--B--\r\n");
  ASSERT_TRUE(form.has_value());
  EXPECT_TRUE(form->parts.empty());
}

}  // namespace
}  // namespace prism::api
