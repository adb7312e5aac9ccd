-- The blog's three tables; the same DDL runs on MariaDB/MySQL and on SQLite.
CREATE TABLE IF NOT EXISTS blog_users (
    id INTEGER PRIMARY KEY,
    name VARCHAR(100) NOT NULL
);
CREATE TABLE IF NOT EXISTS blog_posts (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL,
    title VARCHAR(200) NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS blog_comments (
    id INTEGER PRIMARY KEY,
    post_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX blog_comments_post ON blog_comments (post_id);
