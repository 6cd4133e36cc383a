//! A TCP proxy on 127.0.0.1 that can black-hole its connections: once `black_hole` is called,
//! every connection accepted before it stops forwarding bytes in both directions while its
//! sockets stay open (the peer's kernel still acknowledges, so nothing looks closed), as behind
//! a dead firewall or a vanished NAT entry. Connections accepted afterwards are forwarded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub struct BlackHoleProxy {
    port: u16,
    /// Connections accepted in an earlier epoch than this one are black-holed.
    epoch: Arc<AtomicU64>,
    tasks: Arc<std::sync::Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl BlackHoleProxy {
    pub async fn start(upstream_port: u16) -> BlackHoleProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let epoch = Arc::new(AtomicU64::new(0));
        let tasks = Arc::new(std::sync::Mutex::new(JoinSet::new()));
        let accept = tokio::spawn({
            let epoch = epoch.clone();
            let tasks = tasks.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let born = epoch.load(Ordering::SeqCst);
                    let epoch = epoch.clone();
                    let Ok(mut set) = tasks.lock() else { return };
                    set.spawn(async move {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)).await
                        else {
                            return;
                        };
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        let up = pump(cr, sw, born, epoch.clone());
                        let down = pump(sr, cw, born, epoch);
                        tokio::join!(up, down);
                    });
                    // Reap finished connections now and then.
                    while set.try_join_next().is_some() {}
                }
            }
        });
        BlackHoleProxy {
            port,
            epoch,
            tasks,
            accept,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, every existing connection forwards nothing and stays open.
    pub fn black_hole(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// Copy `from` to `to` until either side closes; once the connection is black-holed, hold both
/// halves open forever and forward nothing more (what was read is dropped).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    born: u64,
    epoch: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if epoch.load(Ordering::SeqCst) != born {
            // The black hole: keep the sockets, never read or write again.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    if epoch.load(Ordering::SeqCst) != born {
        std::future::pending::<()>().await;
    }
    let _ = to.shutdown().await;
}

impl Drop for BlackHoleProxy {
    fn drop(&mut self) {
        self.accept.abort();
        if let Ok(mut set) = self.tasks.lock() {
            set.abort_all();
        }
    }
}
