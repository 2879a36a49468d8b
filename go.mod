module github.com/hookgate/hookgate

go 1.26.8
